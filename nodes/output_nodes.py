"""Where frames leave Ditto: Save Talking Head Video (MP4), and IMAGE / VIDEO for other nodes."""
from __future__ import annotations

import json
import logging
import os
from fractions import Fraction
from typing import Optional

import folder_paths
import torch
from comfy.cli_args import args as comfy_args
from comfy_api.latest import InputImpl, Types, io, ui
from torch import Tensor

from ditto_core.audio.validation import require_scaled_for_playback
from ditto_core.errors import InputError
from ditto_core.progress import ProgressCallback, report
from ditto_core.render.rendered_frames import VideoFrames
from ditto_core.video.writer import X264_PRESETS, VideoWriter, default_preset

from . import ditto_types as T
from .paths import safe_filename_prefix
from .runtime import comfy_progress, timed_stage

log = logging.getLogger(__name__)

ENCODE_CHUNK = 32
"""Frames handed to the encoder per call: a progress/cancel point."""
IMAGE_CHUNK = 16
"""Frames converted to float per step: bounds the temporary float copy on the device."""
IMAGE_WARN_BYTES = 8 << 30
"""An IMAGE above this many bytes of host RAM gets a warning: it is 4 bytes per sub-pixel."""


def audio_for_mux(audio: Optional[dict]) -> Optional[tuple[Tensor, int]]:
    """ComfyUI AUDIO -> ``(waveform (C, T), rate)`` for the writer; more than two channels are
    mixed down to mono (AAC in MP4 is muxed as mono or stereo here). Samples far outside
    [-1, 1] (another pack's integer PCM cast to float) are refused."""
    if audio is None:
        return None
    waveform = audio["waveform"]
    if waveform.ndim == 3:
        waveform = waveform[0]
    if waveform.ndim != 2:
        raise InputError(f"audio: expected a (1, channels, samples) waveform, got shape {tuple(waveform.shape)}.")
    if waveform.shape[0] > 2:
        waveform = waveform.mean(0, keepdim=True)
    waveform = waveform.float().cpu()
    require_scaled_for_playback(waveform, "audio")
    return waveform, int(audio["sample_rate"])


def saved_video_ui(saved: ui.SavedResult, stats: dict) -> dict:
    """A saving node's UI output: the MP4 for the frontend's own video preview (as core Save
    Video reports it, under ``images``) and the stage timing."""
    return {**ui.PreviewVideo([saved]).as_dict(), **stats}


def workflow_metadata(node: type[io.ComfyNode]) -> Optional[dict[str, str]]:
    """MP4 tags that let ComfyUI restore the graph from the file, as core Save Video writes them:
    ``prompt`` and every ``extra_pnginfo`` entry (the UI's ``workflow``) as JSON. None under
    ``--disable-metadata``."""
    if comfy_args.disable_metadata:
        return None
    tags = {key: json.dumps(value) for key, value in (node.hidden.extra_pnginfo or {}).items()}
    if node.hidden.prompt is not None:
        tags["prompt"] = json.dumps(node.hidden.prompt)
    return tags or None


def output_file(filename_prefix: str, width: int, height: int) -> tuple[str, ui.SavedResult]:
    """Next free ``<output>/<prefix>_NNNNN_.mp4``: its path and how the UI and /history name it."""
    folder, stem, counter, subfolder, _ = folder_paths.get_save_image_path(
        safe_filename_prefix(filename_prefix), folder_paths.get_output_directory(), width, height)
    name = f"{stem}_{counter:05}_.mp4"
    return os.path.join(folder, name), ui.SavedResult(name, subfolder, io.FolderType.output)


def save_mp4(
    frames: VideoFrames,
    audio: Optional[dict],
    filename_prefix: str,
    crf: int,
    preset: str,
    progress: Optional[ProgressCallback],
    metadata: Optional[dict[str, str]] = None,
) -> ui.SavedResult:
    """Encode ``frames`` (+ audio) to the next free MP4 of ``filename_prefix``, tagged with
    ``metadata``; nothing is left on failure or cancel (the writer renames its temporary file
    only on success)."""
    total, height, width = frames.frames.shape[:3]
    if total == 0:
        raise InputError("Save Talking Head Video: there are no frames to save; check the audio length.")
    path, saved = output_file(filename_prefix, width, height)
    with VideoWriter(path, width=width, height=height, fps=frames.fps, crf=crf, preset=preset,
                     audio=audio_for_mux(audio), expected_frames=total, metadata=metadata) as writer:
        for start in range(0, total, ENCODE_CHUNK):
            stop = min(start + ENCODE_CHUNK, total)
            writer.write(frames.frames[start:stop])
            report(progress, stop, total)
    return saved


def frames_to_image(frames: VideoFrames, progress: Optional[ProgressCallback] = None) -> Tensor:
    """(T, H, W, 3) uint8 frames on any device -> ComfyUI IMAGE: (T, H, W, 3) float32 in [0, 1] on the CPU.

    Copies uint8 off the device in chunks (a quarter of the bytes of float) and converts on the
    host, so device memory never holds a float copy of the whole clip.
    """
    source = frames.frames
    image = torch.empty(source.shape, dtype=torch.float32)
    if image.nbytes > IMAGE_WARN_BYTES:
        log.warning("Ditto Frames -> IMAGE: %d frames of %dx%d need %.1f GB of RAM as an IMAGE; save the video "
                    "with Save Talking Head Video instead if memory runs short.",
                    source.shape[0], source.shape[2], source.shape[1], image.nbytes / 1e9)
    for start in range(0, source.shape[0], IMAGE_CHUNK):
        stop = min(start + IMAGE_CHUNK, source.shape[0])
        torch.div(source[start:stop].cpu(), 255.0, out=image[start:stop])
        report(progress, stop, source.shape[0])
    return image


class SaveTalkingHeadVideo(io.ComfyNode):
    """Writes the frames and the speech to an MP4 in ComfyUI's output folder."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoSaveVideo",
            display_name="Save Talking Head Video",
            description="H.264 MP4 with the speech as AAC, encoded while frames stream off the model device. The file "
                        "appears only once complete; a cancelled run leaves nothing behind. It carries the "
                        "workflow (unless ComfyUI runs with --disable-metadata): drop it on the canvas to reload "
                        "the graph.",
            inputs=[
                T.FRAMES.Input("frames", tooltip="From Paste Back."),
                io.String.Input("filename_prefix", default="ditto/talking_head",
                                tooltip="File name prefix inside the output folder; subfolders allowed, '..' and "
                                        "absolute paths are removed."),
                io.Int.Input("crf", default=18, min=0, max=51,
                             tooltip="x264 quality: 0 lossless, 18 visually lossless, 23 default, higher is smaller."),
                io.Combo.Input("preset", options=list(X264_PRESETS), default=default_preset(),
                               tooltip="x264 speed/size trade-off: faster presets encode quicker, files get larger."),
                io.Audio.Input("audio", optional=True, tooltip="Speech to mux in (the same AUDIO the features "
                                                               "came from); silent video when unconnected."),
            ],
            outputs=[],
            is_output_node=True,
        )

    @classmethod
    def execute(cls, frames: VideoFrames, filename_prefix: str, crf: int, preset: str,
                audio: Optional[dict] = None) -> io.NodeOutput:
        with timed_stage("Save Video") as timer:
            saved = save_mp4(frames, audio, filename_prefix, crf, preset, comfy_progress(len(frames)),
                             workflow_metadata(cls))
        return io.NodeOutput(ui=saved_video_ui(saved, timer.ui(len(frames))))


class FramesToImage(io.ComfyNode):
    """Ditto frames as a ComfyUI IMAGE batch, for any image node."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoFramesToImage",
            display_name="Ditto Frames to IMAGE",
            description="Copies the frames to the CPU as a float IMAGE batch (4 bytes per sub-pixel: a 15 s "
                        "1080p clip needs about 9 GB of RAM; a warning is logged above 8 GB).",
            inputs=[T.FRAMES.Input("frames", tooltip="From Paste Back.")],
            outputs=[io.Image.Output(display_name="images", tooltip="(frames, height, width, 3) float in [0, 1].")],
        )

    @classmethod
    def execute(cls, frames: VideoFrames) -> io.NodeOutput:
        with timed_stage("Frames to IMAGE") as timer:
            image = frames_to_image(frames, comfy_progress(len(frames)))
        return io.NodeOutput(image, ui=timer.ui(len(frames)))


class FramesToVideo(io.ComfyNode):
    """Ditto frames (+ speech) as a ComfyUI VIDEO, e.g. for the core Save Video node."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoFramesToVideo",
            display_name="Ditto Frames to VIDEO",
            description="Wraps the frames (copied to the CPU as an IMAGE) and the audio in a VIDEO value.",
            inputs=[
                T.FRAMES.Input("frames", tooltip="From Paste Back."),
                io.Audio.Input("audio", optional=True, tooltip="Soundtrack of the video; silent when unconnected."),
            ],
            outputs=[io.Video.Output(display_name="video", tooltip="A VIDEO at the frames' rate (25 fps).")],
        )

    @classmethod
    def execute(cls, frames: VideoFrames, audio: Optional[dict] = None) -> io.NodeOutput:
        if audio is not None:
            audio_for_mux(audio)  # the checks only: the VIDEO keeps the AUDIO as it came
        with timed_stage("Frames to VIDEO") as timer:
            components = Types.VideoComponents(images=frames_to_image(frames, comfy_progress(len(frames))),
                                               frame_rate=Fraction(frames.fps).limit_denominator(1001), audio=audio)
        return io.NodeOutput(InputImpl.VideoFromComponents(components), ui=timer.ui(len(frames)))


NODES = [SaveTalkingHeadVideo, FramesToImage, FramesToVideo]
