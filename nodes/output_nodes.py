"""Where frames leave Ditto: Save Talking Head Video (MP4), and IMAGE / VIDEO for other nodes."""
from __future__ import annotations

import logging
import os
from fractions import Fraction
from typing import Optional

import folder_paths
import torch
from comfy_api.latest import InputImpl, Types, io, ui
from torch import Tensor

from ditto_core.errors import InputError
from ditto_core.progress import ProgressCallback, report
from ditto_core.render.rendered_frames import VideoFrames
from ditto_core.video.writer import X264_PRESETS, VideoWriter, default_preset

from . import ditto_types as T
from .paths import safe_filename_prefix
from .runtime import comfy_progress, timed_stage

log = logging.getLogger(__name__)

VIDEO_KEY = "ditto_video"
"""UI-output key of the saved MP4 (``{filename, subfolder, type}``, as ComfyUI's /view expects)."""
ENCODE_CHUNK = 32
"""Frames handed to the encoder per call: a progress/cancel point."""
IMAGE_CHUNK = 16
"""Frames converted to float per step: bounds the temporary float copy on the device."""
IMAGE_WARN_BYTES = 8 << 30
"""An IMAGE above this many bytes of host RAM gets a warning: it is 4 bytes per sub-pixel."""


def audio_for_mux(audio: Optional[dict]) -> Optional[tuple[Tensor, int]]:
    """ComfyUI AUDIO -> ``(waveform (C, T), rate)`` for the writer; more than two channels are
    mixed down to mono (AAC in MP4 is muxed as mono or stereo here)."""
    if audio is None:
        return None
    waveform = audio["waveform"]
    if waveform.ndim == 3:
        waveform = waveform[0]
    if waveform.ndim != 2:
        raise InputError(f"audio: expected a (1, channels, samples) waveform, got shape {tuple(waveform.shape)}.")
    if waveform.shape[0] > 2:
        waveform = waveform.mean(0, keepdim=True)
    return waveform.float().cpu(), int(audio["sample_rate"])


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
) -> ui.SavedResult:
    """Encode ``frames`` (+ audio) to the next free MP4 of ``filename_prefix``; nothing is left
    on failure or cancel (the writer renames its temporary file only on success)."""
    total, height, width = frames.frames.shape[:3]
    if total == 0:
        raise InputError("Save Talking Head Video: there are no frames to save; check the audio length.")
    path, saved = output_file(filename_prefix, width, height)
    with VideoWriter(path, width=width, height=height, fps=frames.fps, crf=crf, preset=preset,
                     audio=audio_for_mux(audio), expected_frames=total) as writer:
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
        return io.Schema(
            node_id="DittoSaveVideo",
            display_name="Save Talking Head Video",
            category=T.CATEGORY,
            description="H.264 MP4 with the speech as AAC, encoded while frames stream off the GPU. The file "
                        "appears only once complete; a cancelled run leaves nothing behind.",
            inputs=[
                T.FRAMES.Input("frames", tooltip="From GPU PutBack."),
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
            saved = save_mp4(frames, audio, filename_prefix, crf, preset, comfy_progress(len(frames)))
        return io.NodeOutput(ui={VIDEO_KEY: [saved], **timer.ui(len(frames))})


class FramesToImage(io.ComfyNode):
    """Ditto frames as a ComfyUI IMAGE batch, for any image node."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="DittoFramesToImage",
            display_name="Ditto Frames to IMAGE",
            category=T.CATEGORY,
            description="Copies the frames to the CPU as a float IMAGE batch (4 bytes per sub-pixel: a 15 s "
                        "1080p clip needs about 9 GB of RAM; a warning is logged above 8 GB).",
            inputs=[T.FRAMES.Input("frames", tooltip="From GPU PutBack.")],
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
        return io.Schema(
            node_id="DittoFramesToVideo",
            display_name="Ditto Frames to VIDEO",
            category=T.CATEGORY,
            description="Wraps the frames (copied to the CPU as an IMAGE) and the audio in a VIDEO value.",
            inputs=[
                T.FRAMES.Input("frames", tooltip="From GPU PutBack."),
                io.Audio.Input("audio", optional=True, tooltip="Soundtrack of the video; silent when unconnected."),
            ],
            outputs=[io.Video.Output(display_name="video", tooltip="A VIDEO at the frames' rate (25 fps).")],
        )

    @classmethod
    def execute(cls, frames: VideoFrames, audio: Optional[dict] = None) -> io.NodeOutput:
        with timed_stage("Frames to VIDEO") as timer:
            components = Types.VideoComponents(images=frames_to_image(frames, comfy_progress(len(frames))),
                                               frame_rate=Fraction(frames.fps).limit_denominator(1001), audio=audio)
        return io.NodeOutput(InputImpl.VideoFromComponents(components), ui=timer.ui(len(frames)))


NODES = [SaveTalkingHeadVideo, FramesToImage, FramesToVideo]
