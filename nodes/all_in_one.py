"""Ditto Talking Head: the whole pipeline in one node, for users who want a single box."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional

from comfy_api.latest import InputImpl, io
from torch import Tensor

from ditto_core.errors import InputError
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.registration.options import RegistrationOptions
from ditto_core.video.writer import X264_PRESETS, check_encoder_options, default_preset

from . import ditto_types as T
from .audio_nodes import encode_speech
from .model_registry import REGISTRY, ModelHandle
from .motion_nodes import SEED_MAX
from .output_nodes import audio_for_mux, output_file, saved_video_ui, workflow_metadata
from .runtime import staged_progress, timed_stage
from .source_nodes import register_source

_STAGES = 4  # register, audio, motion, render + put-back + encode


class DittoTalkingHead(io.ComfyNode):
    """Portrait + speech -> MP4 in one node: the stage nodes' work with Ditto's default settings."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoTalkingHead",
            display_name="Ditto Talking Head",
            description="Registers the portrait, encodes the speech, samples the motion, then renders, pastes back "
                        "and encodes batch by batch (memory stays flat for long clips). Use the stage nodes for "
                        "finer control.",
            inputs=[
                T.MODELS.Input("models", tooltip="From Load Ditto Models."),
                io.Image.Input("image", tooltip="The portrait (or video frames) to animate."),
                io.Audio.Input("audio", tooltip="The speech to lip-sync."),
                io.Int.Input("steps", default=25, min=1, max=1000, tooltip="DDIM steps: 25 fast, 50 Ditto's default."),
                io.Int.Input("seed", default=0, min=0, max=SEED_MAX, control_after_generate=True,
                             tooltip="Seed of the motion diffusion: same seed, same video."),
                io.Boolean.Input("detect_face", default=True, label_on="detect face", label_off="already cropped",
                                 tooltip="Off: the image already is a face crop and is used whole."),
                io.String.Input("filename_prefix", default="ditto/talking_head",
                                tooltip="File name prefix inside the output folder."),
                io.Int.Input("crf", default=18, min=0, max=51, tooltip="x264 quality: lower is better and larger."),
                io.Combo.Input("preset", options=list(X264_PRESETS), default=default_preset(), tooltip="x264 speed/size trade-off."),
                T.MOTION_OPTIONS.Input("options", optional=True,
                                       tooltip="From Eye Lock / Motion Options; Ditto's defaults when unconnected."),
            ],
            outputs=[io.Video.Output(display_name="video", tooltip="The saved MP4, for core video nodes.")],
            is_output_node=True,
        )

    @classmethod
    def execute(cls, models: ModelHandle, image: Tensor, audio: dict, steps: int, seed: int, detect_face: bool,
                filename_prefix: str, crf: int, preset: str,
                options: Optional[MotionOptions] = None) -> io.NodeOutput:
        # Settings first: a bad one must fail now, not after registration, audio and motion.
        check_encoder_options(crf, preset)
        muxed = audio_for_mux(audio)
        motion_options = replace(options or MotionOptions(), steps=steps, seed=seed)
        stage = staged_progress(_STAGES)
        with timed_stage("Talking Head", models.torch_device) as timer:
            asked = time.perf_counter()
            pipeline = REGISTRY.pipeline(models)  # ComfyUI's model management may free memory first
            pipeline.times.seconds.clear()  # this prompt's stages only, for the record below
            pipeline.times.seconds["model_management"] = time.perf_counter() - asked
            source = register_source(models, image, RegistrationOptions(detect_face=detect_face), True, stage(0))
            features = encode_speech(models, audio, stage(1))
            # With the pipeline's motion_ahead the render starts on the first motion window (the motion
            # stage's bar then stays empty).
            with pipeline.motion_for_render(source, features, motion_options, stage(2)) as motion:
                del features
                if len(motion) == 0:
                    raise InputError("Ditto Talking Head: the audio yields no video frames; use at least 0.2 s of speech.")
                path, saved = output_file(filename_prefix, source.frames.shape[2], source.frames.shape[1])
                pipeline.render_video(source, motion, path, audio=muxed, crf=crf, preset=preset,
                                      progress=stage(3), metadata=workflow_metadata(cls))
        record = timer.ui(len(motion), pipeline.engine().stats, pipeline.times.seconds)
        return io.NodeOutput(InputImpl.VideoFromFile(path), ui=saved_video_ui(saved, record))


NODES = [DittoTalkingHead]
