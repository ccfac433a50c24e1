"""Register Avatar: a portrait (or the frames of a video) -> ``DITTO_SOURCE``."""
from __future__ import annotations

from typing import Optional

from comfy_api.latest import io
from torch import Tensor

from ditto_core.progress import ProgressCallback
from ditto_core.registration.options import MAX_SOURCE_SIDE, RegistrationOptions
from ditto_core.registration.source_info import SourceInfo

from . import ditto_types as T
from .model_registry import REGISTRY, ModelHandle
from .runtime import comfy_progress, timed_stage


def register_source(
    handle: ModelHandle,
    image: Tensor,
    options: RegistrationOptions,
    use_cache: bool,
    progress: Optional[ProgressCallback],
) -> SourceInfo:
    """ComfyUI IMAGE ``(N, H, W, 3)`` float in [0, 1] -> SourceInfo on the handle's device.

    One frame is a still portrait; several are the frames of a video source.
    """
    return REGISTRY.pipeline(handle).register(image, options, name="Register Avatar image", progress=progress,
                                              use_cache=use_cache)


class RegisterAvatar(io.ComfyNode):
    """Face crop, appearance features, motion and eye state of the avatar, once per portrait."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        defaults = RegistrationOptions()
        return T.schema(
            node_id="DittoRegisterAvatar",
            display_name="Register Avatar",
            description="Analyses the portrait (one image) or the source video (an IMAGE batch of its frames) "
                        "once; the result is cached on disk, so re-running with the same picture is instant.",
            inputs=[
                T.MODELS.Input("models", tooltip="From Load Ditto Models."),
                io.Image.Input("image", tooltip="One portrait, or a batch of video frames (e.g. from Get Video "
                                                "Components) for a video source. One clearly visible face."),
                io.Boolean.Input("detect_face", default=True, label_on="detect face", label_off="already cropped",
                                 tooltip="Off: the image already is a face crop (roughly Ditto's framing) and is "
                                         "used whole; no face-detection models are needed."),
                io.Boolean.Input("use_cache", default=True,
                                 tooltip="Store the analysis on disk (ComfyUI user folder) and reuse it for the "
                                         "same frames, models and settings."),
                io.Float.Input("crop_scale", default=defaults.crop_scale, min=1.0, max=5.0, step=0.05,
                               tooltip="Crop size relative to the face; larger shows more hair and shoulders."),
                io.Float.Input("crop_vx_ratio", default=defaults.crop_vx_ratio, min=-1.0, max=1.0, step=0.005,
                               tooltip="Horizontal crop shift, as a fraction of the crop size."),
                io.Float.Input("crop_vy_ratio", default=defaults.crop_vy_ratio, min=-1.0, max=1.0, step=0.005,
                               tooltip="Vertical crop shift, as a fraction of the crop size (negative: more forehead)."),
                io.Int.Input("face_index", default=-1, min=-1, max=63,
                             tooltip="Which face when there are several: -1 the largest, else 0, 1, ... from left to right."),
                io.Int.Input("max_size", default=defaults.max_size, min=256, max=MAX_SOURCE_SIDE, step=2,
                             tooltip="Frames with a longer side than this are downscaled first; the output video "
                                     "has this resolution."),
                io.Int.Input("video_smoothing", default=defaults.smo_k_s, min=1, max=63,
                             tooltip="Video sources: frames over which the source's head motion is averaged (1: off)."),
            ],
            outputs=[T.SOURCE.Output(display_name="source", tooltip="The registered avatar, on the model device.")],
        )

    @classmethod
    def execute(cls, models: ModelHandle, image: Tensor, detect_face: bool, use_cache: bool, crop_scale: float,
                crop_vx_ratio: float, crop_vy_ratio: float, face_index: int, max_size: int,
                video_smoothing: int) -> io.NodeOutput:
        options = RegistrationOptions(
            crop_scale=crop_scale, crop_vx_ratio=crop_vx_ratio, crop_vy_ratio=crop_vy_ratio,
            smo_k_s=video_smoothing, max_size=max_size, face_index=None if face_index == -1 else face_index,
            detect_face=detect_face,
        )
        with timed_stage("Register Avatar", models.torch_device) as timer:
            source = register_source(models, image, options, use_cache, comfy_progress(len(image)))
        return io.NodeOutput(source, ui=timer.ui(len(source)))


NODES = [RegisterAvatar]
