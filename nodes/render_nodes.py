"""Warp + Decode (-> ``DITTO_RENDERS``) and Paste Back (-> ``DITTO_FRAMES``)."""
from __future__ import annotations

from typing import Optional

import torch
from comfy_api.latest import io

from ditto_core.motion.motion_sequence import MotionSequence
from ditto_core.progress import ProgressCallback, report
from ditto_core.registration.source_info import SourceInfo
from ditto_core.render.rendered_frames import RenderedFrames, VideoFrames
from ditto_core.render.putback import paste_back
from ditto_core.render.warp_decode import MAX_BATCH

from . import ditto_types as T
from .model_registry import REGISTRY, ModelHandle
from .runtime import comfy_progress, timed_stage

PUTBACK_CHUNK = 32
"""Frames pasted per call: a progress/cancel point every chunk without a per-frame launch."""


def render_faces(
    handle: ModelHandle,
    source: SourceInfo,
    motion: MotionSequence,
    batch_size: int,
    compile: bool,
    progress: Optional[ProgressCallback],
) -> RenderedFrames:
    """Warp the avatar's features to every frame's keypoints and decode 512x512 faces.

    The engine (with its compiled graphs) is kept per batch size and compile setting, so only
    the first run pays for compilation.
    """
    return REGISTRY.pipeline(handle).engine(batch_size, compile).render(source, motion, progress)


def paste_faces(
    renders: RenderedFrames, source: SourceInfo, backend: str, progress: Optional[ProgressCallback]
) -> VideoFrames:
    """Blend every render into its full-resolution source frame: (T, H, W, 3) uint8 on the device."""
    total = len(renders)
    frames = torch.empty((total, *source.frames.shape[1:]), dtype=torch.uint8, device=source.frames.device)
    for start in range(0, total, PUTBACK_CHUNK):
        stop = min(start + PUTBACK_CHUNK, total)
        paste_back(source.frames, renders.images[start:stop], source.M_c2o, renders.source_index[start:stop],
                   out=frames[start:stop], backend=backend)
        report(progress, stop, total)
    return VideoFrames(frames=frames, fps=renders.fps)


class WarpDecode(io.ComfyNode):
    """The avatar's appearance, moved by the motion and decoded to 512x512 faces, on the model device."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoWarpDecode",
            display_name="Warp + Decode",
            description="Renders the face of every frame in batches. With compile on (CUDA + Triton), the first "
                        "run builds CUDA graphs (cached on disk for later launches); elsewhere it runs eagerly.",
            inputs=[
                T.MODELS.Input("models", tooltip="From Load Ditto Models (its precision is used)."),
                T.SOURCE.Input("source", tooltip="From Register Avatar."),
                T.MOTION.Input("motion", tooltip="From LMDM Sampler."),
                io.Int.Input("batch_size", default=0, min=0, max=MAX_BATCH,
                             tooltip="Frames rendered per batch; 0 picks the largest that fits in half the free "
                                     "VRAM. Lower it on small GPUs."),
                io.Boolean.Input("compile", default=True,
                                 tooltip="torch.compile with CUDA graphs: fastest after the first run. Turn off to "
                                         "skip compilation (e.g. for a single short clip)."),
            ],
            outputs=[T.RENDERS.Output(display_name="renders", tooltip="512x512 face renders, on the model device.")],
        )

    @classmethod
    def execute(cls, models: ModelHandle, source: SourceInfo, motion: MotionSequence, batch_size: int,
                compile: bool) -> io.NodeOutput:
        with timed_stage("Warp+Decode", models.torch_device) as timer:
            renders = render_faces(models, source, motion, batch_size, compile, comfy_progress(len(motion)))
        engine = REGISTRY.pipeline(models).engine(batch_size, compile)  # the one render_faces used
        return io.NodeOutput(renders, ui=timer.ui(len(renders), engine.stats))


class PutBack(io.ComfyNode):
    """The rendered faces pasted back into the full-resolution source frames, on the model device."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoPutBack",
            display_name="Paste Back",
            description="Pastes each face into its source frame with Ditto's feathered mask; uint8 frames at the "
                        "source resolution stay on the model device until saved or converted.",
            inputs=[
                T.RENDERS.Input("renders", tooltip="From Warp + Decode."),
                T.SOURCE.Input("source", tooltip="The same Register Avatar output the renders came from."),
                io.Combo.Input("backend", options=["auto", "torch"], default="auto",
                               tooltip="'auto': the fused Triton kernel on CUDA when available, else PyTorch. "
                                       "'torch': always the PyTorch path."),
            ],
            outputs=[T.FRAMES.Output(display_name="frames", tooltip="Finished uint8 frames, on the model device.")],
        )

    @classmethod
    def execute(cls, renders: RenderedFrames, source: SourceInfo, backend: str) -> io.NodeOutput:
        with timed_stage("PutBack", source.device) as timer:
            frames = paste_faces(renders, source, backend, comfy_progress(len(renders)))
        return io.NodeOutput(frames, ui=timer.ui(len(frames)))


NODES = [WarpDecode, PutBack]
