"""A live round's stitching, replayed from CUDA graphs.

A round stitches the new frames of every stream in one batch
(:func:`~.motion_stitch.stitch_chunks`): about a hundred small kernels whose cost is almost all
launches (and held GIL, which the render thread then waits for). On CUDA the per-row math
(:func:`~.motion_stitch.stitch_rows`) is recorded once per row count, padded to a power of two,
and replayed; off CUDA it runs eagerly.

A graph reads the stream table's tensors where it recorded them, so graphs belong to one table:
when the runtime's streams change, their setups are stacked again and the graphs recorded again
(an eager run and a recording for each row count in use). The graphs keep the table and the
stitching network's weights they recorded alive, so neither is freed under them.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Optional

import torch
from torch import Tensor, nn

from ..audio.window_graphs import padded_batch
from ..cuda_graphs import CapturedCall
from ..cuda_streams import owned_stream
from .motion_sequence import MotionSequence
from .motion_stitch import StitchChunk, StitchSetup, StitchTable, chunk_inputs, split_chunks, stitch_chunks, stitch_rows


class RoundStitcher:
    """Stitches a live runtime's rounds, one batch each, through CUDA graphs where it can.

    Owned by one runtime and called from its motion thread (a graph's buffers are not shared).
    """

    def __init__(self, stitch_net: Optional[nn.Module], device: torch.device, cuda_graphs: bool = True) -> None:
        self.stitch_net = stitch_net
        self.graphed = cuda_graphs and device.type == "cuda"
        self._setups: tuple[StitchSetup, ...] = ()
        self._table: Optional[StitchTable] = None
        self._graphs: dict[int, CapturedCall] = {}
        self._weights: list[Tensor] = []
        # The graphs' own capture stream: a cuBLAS workspace that no other owner's graphs write.
        self._stream = owned_stream(self, device) if self.graphed else None

    def stitch(self, setups: Sequence[StitchSetup], chunks: Sequence[StitchChunk]) -> list[MotionSequence]:
        """One sequence per chunk; a chunk's ``slot`` indexes ``setups`` (say, the runtime's open streams)."""
        if not chunks:
            return []
        table = self._table_of(setups)
        if not self.graphed:
            return stitch_chunks(table, chunks, self.stitch_net)
        sizes = [chunk.vectors.shape[0] for chunk in chunks]
        rows = padded_batch(sum(sizes))
        inputs = chunk_inputs(table, chunks, rows)
        captured = self._graphs.get(rows)
        if captured is None:
            captured = self._graphs[rows] = CapturedCall(partial(stitch_rows, table, self.stitch_net), inputs,
                                                         self._stream)
            if self.stitch_net is not None:
                self._weights = [p.detach() for p in self.stitch_net.parameters()]
            stitched = captured.capture()
        else:
            stitched = tuple(t.clone() for t in captured.replay(inputs))  # the next replay overwrites the graph's
        return split_chunks(stitched, sizes)

    def _table_of(self, setups: Sequence[StitchSetup]) -> StitchTable:
        """``setups`` stacked; stacked again (and the graphs dropped) only when they change."""
        if len(setups) != len(self._setups) or any(a is not b for a, b in zip(setups, self._setups)):
            self._setups, self._table, self._graphs = tuple(setups), StitchTable.of(setups), {}
        return self._table
