"""Eye Lock / Motion Options and LMDM Sampler: speech features -> ``DITTO_MOTION``."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from comfy_api.latest import io

from ditto_core.audio.audio_features import AudioFeatures
from ditto_core.motion.motion_options import EMOTIONS, LMDM_WINDOW, MAX_POSE_OFFSET, MAX_STEPS, MotionOptions
from ditto_core.registration.source_info import SourceInfo

from . import ditto_types as T
from .model_registry import REGISTRY, ModelHandle
from .runtime import comfy_progress, timed_stage

SEED_MAX = 0xFFFF_FFFF_FFFF_FFFF
_TRI_STATE = {"auto": None, "on": True, "off": False}
_FADE_TARGETS = {"none": "", "first generated frame": "d0", "source": "s"}
_SAMPLER_MODES = {
    "auto (fp32, tf32 with fp16/bf16 models)": ("auto", False),
    "fp32 (exact)": ("fp32", False),
    "tf32 (2x faster)": ("tf32", False),
    "bf16 compiled (fastest, compiles once)": ("bf16", True),
}
"""LMDM Sampler speed choice -> (``MotionOptions.sampler_precision``, ``sampler_compile``)."""
_BLINKS = {"random, 2.4-4 s apart (Ditto)": 0, "2 s apart": 50, "3 s apart": 75, "5 s apart": 125, "off": -1}
"""Blink choice -> ``MotionOptions.delta_eye_open_n`` (open-eye frames between blinks at 25 fps)."""


class MotionOptionsNode(io.ComfyNode):
    """Emotion, eye behaviour, head-pose offsets and fades for the LMDM Sampler."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        angle = dict(default=0.0, min=-MAX_POSE_OFFSET, max=MAX_POSE_OFFSET, step=0.5)
        return T.schema(
            node_id="DittoMotionOptions",
            display_name="Eye Lock / Motion Options",
            description="How the generated motion is conditioned and applied. Defaults reproduce Ditto.",
            inputs=[
                io.Combo.Input("emotion", options=list(EMOTIONS), default="neutral",
                               tooltip="Emotion the face expresses while speaking."),
                io.Boolean.Input("eye_lock", default=False,
                                 tooltip="Condition every frame on the eye state of the source's first frame "
                                         "(Ditto's eye_f0_mode): steadier eyes, useful for video sources."),
                io.Combo.Input("drive_eye", options=list(_TRI_STATE), default="auto",
                               tooltip="Whether the eyes follow the generated motion: 'auto' yes for a still "
                                       "portrait, no for a video source (the video keeps its own eyes)."),
                io.Combo.Input("blinks", options=list(_BLINKS), default=next(iter(_BLINKS)),
                               tooltip="Procedural blinks, replayed from Ditto's recorded blink: they need "
                                       "models/ditto/ditto_cfg/v0.4_hubert_cfg_pytorch.pkl (HuggingFace folder "
                                       "ditto_cfg/) and do nothing without it. They show where the eyes are "
                                       "driven (see drive_eye). 'off': the eyes stay open, as in Ditto."),
                io.Float.Input("pitch_offset", tooltip="Degrees added to the head pitch (nod; + looks down).", **angle),
                io.Float.Input("yaw_offset", tooltip="Degrees added to the head yaw (turn left/right).", **angle),
                io.Float.Input("roll_offset", tooltip="Degrees added to the head roll (tilt).", **angle),
                io.Combo.Input("fade_to", options=list(_FADE_TARGETS), default="none",
                               tooltip="Fade the expression in from / out to this pose at the clip's ends."),
                io.Int.Input("fade_in", default=0, min=0, max=250,
                             tooltip="Frames of fade-in at the start (needs fade_to); 25 frames = 1 s."),
                io.Int.Input("fade_out", default=0, min=0, max=250,
                             tooltip="Frames of fade-out at the end (needs fade_to); 25 frames = 1 s."),
                io.Boolean.Input("stitching", default=True,
                                 tooltip="Run Ditto's stitching network so the shoulders stay attached to the head."),
            ],
            outputs=[T.MOTION_OPTIONS.Output(display_name="options", tooltip="For the LMDM Sampler.")],
        )

    @classmethod
    def execute(cls, emotion: str, eye_lock: bool, drive_eye: str, blinks: str, pitch_offset: float, yaw_offset: float,
                roll_offset: float, fade_to: str, fade_in: int, fade_out: int, stitching: bool) -> io.NodeOutput:
        fade_type = _FADE_TARGETS[fade_to]
        options = MotionOptions(
            emo=EMOTIONS.index(emotion),
            eye_f0_mode=eye_lock,
            drive_eye=_TRI_STATE[drive_eye],
            delta_eye_open_n=_BLINKS[blinks],
            delta_pitch=pitch_offset,
            delta_yaw=yaw_offset,
            delta_roll=roll_offset,
            fade_type=fade_type,
            # With no fade target the lengths mean nothing; MotionOptions rejects them, so drop them.
            fade_in=fade_in if fade_type else 0,
            fade_out=fade_out if fade_type else 0,
            flag_stitching=stitching,
        )
        return io.NodeOutput(options)


class LMDMSampler(io.ComfyNode):
    """Ditto's motion diffusion: the head and face motion of every frame, from the speech.

    All randomness comes from one generator seeded with ``seed``: the same seed gives the same
    motion on the same device.
    """

    @classmethod
    def define_schema(cls) -> io.Schema:
        defaults = MotionOptions()
        return T.schema(
            node_id="DittoLMDMSampler",
            display_name="LMDM Sampler",
            description="Samples the motion of every output frame with the LMDM (DDIM, 80-frame windows "
                        "cross-faded over 'overlap' frames) and maps it onto the avatar's keypoints.",
            inputs=[
                T.MODELS.Input("models", tooltip="From Load Ditto Models."),
                T.SOURCE.Input("source", tooltip="From Register Avatar."),
                T.AUDIO_FEATURES.Input("audio_features", tooltip="From Audio Features."),
                io.Int.Input("steps", default=defaults.steps, min=1, max=MAX_STEPS,
                             tooltip="DDIM steps: 25 is fast, 50 is Ditto's default (a little smoother)."),
                io.Int.Input("seed", default=0, min=0, max=SEED_MAX, control_after_generate=True,
                             tooltip="Seed of the diffusion noise (and of random blinks): same seed, same motion."),
                io.Int.Input("overlap", default=defaults.overlap_v2, min=0, max=LMDM_WINDOW - 1,
                             tooltip="Frames shared by consecutive 80-frame windows, cross-faded to hide the seam."),
                io.Int.Input("smoothing", default=defaults.smo_k_d, min=1, max=31,
                             tooltip="Moving-average width over frames for head pose and scale (1: off)."),
                io.Combo.Input("precision", options=list(_SAMPLER_MODES), default=next(iter(_SAMPLER_MODES)),
                               tooltip="Arithmetic of the diffusion network. fp32 reproduces Ditto's numbers; tf32 "
                                       "is about 2x faster (motion within 7e-4 of fp32); bf16 compiled about 4x "
                                       "(within about 1e-2; the first run compiles for 10-15 s). auto: fp32 with "
                                       "fp32 models, tf32 with fp16 or bf16 ones (an error no larger than theirs)."),
                T.MOTION_OPTIONS.Input("options", optional=True,
                                       tooltip="From Eye Lock / Motion Options; Ditto's defaults when unconnected."),
            ],
            outputs=[T.MOTION.Output(display_name="motion", tooltip="Per-frame source/driving keypoints.")],
        )

    @classmethod
    def execute(cls, models: ModelHandle, source: SourceInfo, audio_features: AudioFeatures, steps: int, seed: int,
                overlap: int, smoothing: int, precision: str, options: Optional[MotionOptions] = None) -> io.NodeOutput:
        sampler_precision, sampler_compile = _SAMPLER_MODES[precision]
        options = replace(options or MotionOptions(), steps=steps, seed=seed, overlap_v2=overlap, smo_k_d=smoothing,
                          sampler_precision=sampler_precision, sampler_compile=sampler_compile)
        with timed_stage("LMDM Sampler", models.torch_device) as timer:
            motion = REGISTRY.pipeline(models).motion(source, audio_features, options, comfy_progress())
        return io.NodeOutput(motion, ui=timer.ui(len(motion)))


NODES = [MotionOptionsNode, LMDMSampler]
