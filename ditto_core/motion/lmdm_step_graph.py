"""An LMDM window recorded as two CUDA graphs, its prologue and one DDIM step, the step replayed once per step.

A window recorded whole (:class:`~ditto_core.cuda_graphs.CapturedCall` over the sampler's loop)
holds every step's kernels, about 4,700 at 25 steps, and recording it is most of what a new
process's first window costs: an eager warm-up window, the recording's launches, the graph's
instantiation. Here the prologue (the guidance condition and every step's time embeddings) and
one step are recorded. The step reads which step it is from a counter on the device, gathers
that step's rows and constants, and advances the counter, so one recording serves every step.

A window then costs ``steps + 1`` graph launches and a few gathers a step more than the whole
window's graph: every pipeline's samplers (the CLI, ComfyUI, a worker) record steps, so that a
clip's first window does not wait for a whole window's recording; a live runtime, whose windows
are a large share of the device at many streams, keeps the whole-window graph. Measured side by
side in docs/TIME_TO_VIDEO_LOG.md (sessions 50-51).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..cuda_graphs import CapturedCall

__all__ = ["StepGraphs"]

Prologue = Callable[[Tensor, Tensor], tuple[Tensor, ...]]
"""(kp_cond, aud_cond) -> the tensors every step of the window reads."""
Step = Callable[[Tensor, Tensor, Tensor, tuple[Tensor, ...]], Tensor]
"""(x, noise, index, prologue tensors) -> x0 of step ``index``; x becomes the next step's and
``index`` advances, both in place."""


class StepGraphs:
    """One window shape's recordings; :meth:`capture` once, then :meth:`replay` per window.

    ``inputs``: the first window's ``(kp_cond, aud_cond, x_T, noise)``, noise ``(steps - 1, B,
    80, 265)``; ``stream``: the owner's capture stream (:class:`CapturedCall`).
    """

    def __init__(self, prologue: Prologue, step: Step, steps: int, inputs: tuple[Tensor, ...],
                 stream: torch.cuda.Stream) -> None:
        kp_cond, aud_cond, x_T, noise = inputs
        self.steps = steps
        self._prologue = CapturedCall(prologue, (kp_cond, aud_cond), stream)
        # The last step's update is computed too (its output unused): a zero noise row for it.
        noise_rows = noise.new_zeros((steps,) + tuple(noise.shape[1:]))
        index = torch.zeros(1, dtype=torch.long, device=x_T.device)
        # The step reads the prologue's recorded outputs in place: they live as long as its graph.
        recorded = self._prologue
        self._step = CapturedCall(lambda x, rows, at: step(x, rows, at, recorded.outputs),
                                  (x_T, noise_rows, index), stream)
        self._first = inputs

    def capture(self, warm_up: bool = True) -> Tensor:
        """Record both graphs and return the first window, (B, 80, 265) float32.

        ``warm_up``: as :meth:`CapturedCall.capture`; with it, one eager prologue and one eager
        step run first (set-up outside the recordings), a window's worth of launches fewer than
        the whole window's warm-up."""
        first, self._first = self._first, None
        self._prologue.capture(warm_up=warm_up)
        self._prologue.replay()  # the step's warm-up reads its outputs
        if warm_up:
            self._step.warm_up()  # advances its x and counter: both are set again for every window
            self._reset()
        # Replays once after recording; the counter then stands at 1, a valid step for any count.
        self._step.capture(warm_up=False)
        return self.replay(first).clone()

    def replay(self, inputs: tuple[Tensor, ...]) -> Tensor:
        """The window of ``(kp_cond, aud_cond, x_T, noise)``: (B, 80, 265) float32, overwritten by the next replay."""
        kp_cond, aud_cond, x_T, noise = inputs
        self._prologue.replay((kp_cond, aud_cond))
        self._reset(x_T, noise)
        for _ in range(self.steps):
            x_start = self._step.replay()
        return x_start

    def _reset(self, x_T: Tensor | None = None, noise: Tensor | None = None) -> None:
        x, noise_rows, index = self._step.inputs
        with torch.inference_mode():  # as CapturedCall.replay: the buffers may have been made in it
            if x_T is not None:
                x.copy_(x_T)
                noise_rows[: self.steps - 1].copy_(noise)
            index.zero_()

    def release(self) -> None:
        """Free both recordings' outputs now (see :meth:`CapturedCall.release`)."""
        self._step.release()
        self._prologue.release()
