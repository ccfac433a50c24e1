"""Streaming HuBERT windows of many live streams at once, replayed from CUDA graphs.

A live round encodes a few 6480-sample windows (one or two per stream). Eagerly, each window
is a forward of HuBERT-large's 24 layers whose cost is almost all kernel launches (and held
GIL, which the render thread then waits for): more than the LMDM window it feeds. Here the
round's windows go through one forward, padded to a power of two, and on CUDA with our PyTorch
HuBERT that forward is replayed from a graph recorded once per batch size.

The graphs run on a stream of their own, so the host waits only for HuBERT's own work when it
reads the graph's overflow flag: in fp16, rows that are not finite are computed again eagerly
(which, as offline, switches the module to fp32 for good, and this encoder to the eager path).
The graphs keep the weights they recorded alive, so a switch to fp32 elsewhere (the offline
pipeline shares the module) never leaves them reading freed memory.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch
from torch import Tensor

from ..cuda_graphs import CapturedCall
from ..cuda_streams import owned_stream
from .hubert import HUBERT_DIM, HubertFeatureExtractor

MAX_GRAPH_BATCH = 64
"""Windows per replay at most; a round with more is encoded in several replays."""


def padded_batch(windows: int) -> int:
    """The graph batch ``windows`` windows are padded to: the next power of two."""
    return 1 << max(0, windows - 1).bit_length()


class LiveWindowEncoder:
    """:meth:`HubertFeatureExtractor.encode_windows` for a live runtime, through CUDA graphs where it can.

    Owned by one runtime and called from its motion thread (a graph's buffers are not shared);
    elsewhere (onnxruntime, the CPU, ``cuda_graphs=False``) it calls the extractor's batched path.
    """

    def __init__(self, extractor: HubertFeatureExtractor, cuda_graphs: bool = True, priority: int = 0) -> None:
        self.extractor = extractor
        self.window = extractor.window
        model = extractor.model
        self.graphed = cuda_graphs and model is not None and extractor.device.type == "cuda"
        self._graphs: dict[int, CapturedCall] = {}
        self._lock = threading.Lock()
        # The stream the graphs replay on; ``priority`` as for torch.cuda.Stream (lower runs first):
        # a live runtime gives it its motion thread's, since every new window waits for these rows.
        self.stream: Optional[torch.cuda.Stream] = None
        self._weights: list[Tensor] = []
        self._precision = extractor.precision
        if self.graphed:
            self.stream = owned_stream(self, extractor.device, priority)

    def encode(self, windows: Tensor) -> Tensor:
        """``(n, num_samples)`` float speech windows (any device) -> ``(n, valid, 1024)`` float32 features."""
        n = windows.shape[0]
        with torch.inference_mode():
            if not self.graphed or n == 0 or self.extractor.precision != self._precision:
                return self.extractor.encode_windows(windows)
            parts = [self._replay(windows[i : i + MAX_GRAPH_BATCH]) for i in range(0, n, MAX_GRAPH_BATCH)]
            if any(part is None for part in parts):  # fp16 overflow: the exact eager path decides
                return self.extractor.encode_windows(windows)
            return parts[0] if len(parts) == 1 else torch.cat(parts)

    def warm_up(self, max_windows: int) -> None:
        """Record every graph batch size up to ``max_windows`` (a few tens of ms each)."""
        if not self.graphed:
            return
        size = 1
        while True:
            self.encode(torch.zeros(size, self.window.num_samples))
            if size >= min(max_windows, MAX_GRAPH_BATCH):
                return
            size *= 2

    def _replay(self, windows: Tensor) -> Optional[Tensor]:
        """One graph replay for ``n <= MAX_GRAPH_BATCH`` windows; None if its fp16 rows overflowed."""
        device, n = self.extractor.device, windows.shape[0]
        caller = torch.cuda.current_stream(device)
        if windows.is_cuda:  # made on the caller's stream (host windows are copied synchronously)
            self.stream.wait_stream(caller)
        with self._lock, torch.cuda.stream(self.stream):
            size = padded_batch(n)
            captured = self._graphs.get(size)
            if captured is None:
                captured = self._graphs[size] = CapturedCall(self._forward, (torch.zeros(
                    size, self.window.num_samples, device=device),), self.stream)
                self._weights = [p.detach() for p in self.extractor.model.parameters()]
                captured.capture()
            static = captured.inputs[0]
            static[:n].copy_(windows)
            static[n:].zero_()
            features, finite = captured.replay()
            features = features[: n * self.window.valid].clone()  # the next replay overwrites the graph's
            if self._precision == "fp16" and not bool(finite):  # waits for this stream's work only
                self.extractor.overflowed()
                return None
        caller.wait_stream(self.stream)
        features.record_stream(caller)
        return features.view(n, self.window.valid, HUBERT_DIM)

    def _forward(self, windows: Tensor) -> tuple[Tensor, Tensor]:
        features = self.extractor.unchecked_features(windows)
        return features, torch.isfinite(features).all()
