"""Blink schedule: which row of the blink table every output frame shows.

Ditto does not let the LMDM blink a still portrait; it pastes a recorded blink (a table of
per-frame expression offsets, row 0 = eyes open) into the timeline at intervals. The first
blink waits ``start`` frames, blinks are separated by runs of open eyes, and no blink may
start within ``max(end, blink_len)`` frames of the end, so the video ends with open eyes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union

import torch
from torch import Tensor

OPEN_MIN = 60
OPEN_MAX = 100
"""Range (inclusive) of the random number of open-eye frames between two blinks."""


def blink_schedule(
    num_frames: int,
    blink_len: int,
    open_n: Union[int, Sequence[int]],
    generator: Optional[torch.Generator] = None,
    device: Optional[torch.device | str] = None,
) -> Tensor:
    """Per-frame row of the blink table: (num_frames,) int64 in [0, blink_len).

    Args:
        num_frames: length of the output video.
        blink_len: rows of the blink table (frames of one blink).
        open_n: open-eye frames between blinks: -1 never blink; 0 random in
            [OPEN_MIN, OPEN_MAX] (start gap, end margin, then one draw per gap, all from one
            ``torch.randint`` call on ``generator``); n > 0 fixed; a sequence of gaps, its first
            entry the start gap, its last the end margin, cycled for the gaps in between.
        generator: source of the random gaps (its device is where they are drawn).
        device: device of the result (default: the generator's, else CPU).

    The schedule is computed without a loop over blinks: gap lengths are drawn or tiled up to
    the most blinks that can fit, their cumulative sum gives every start, and starts past the
    last allowed one are discarded.
    """
    draw_device = generator.device if generator is not None else torch.device("cpu")
    out_device = torch.device(device) if device is not None else draw_device
    if isinstance(open_n, int) and open_n < 0:
        return torch.zeros(num_frames, dtype=torch.long, device=out_device)

    if isinstance(open_n, int) and open_n == 0:
        most_blinks = num_frames // (blink_len + OPEN_MIN) + 1
        draws = torch.randint(OPEN_MIN, OPEN_MAX + 1, (most_blinks + 1,), generator=generator, device=draw_device)
        draws = draws.to(out_device, non_blocking=True)
        start, end, gaps = draws[0], draws[1], draws[2:]
    else:
        cycle = (open_n,) if isinstance(open_n, int) else tuple(open_n)
        most_blinks = num_frames // (blink_len + min(cycle)) + 1
        cycle_t = torch.tensor(cycle, dtype=torch.long).to(out_device, non_blocking=True)
        start, end = cycle_t[0], cycle_t[-1]
        gaps = cycle_t[torch.arange(1, most_blinks, device=out_device) % len(cycle)]

    steps = torch.cat([start.reshape(1), gaps + blink_len])
    starts = steps.cumsum(0)
    last_start = num_frames - torch.clamp(end, min=blink_len)
    # Discarded blinks are written to one spare slot past the end, which is then dropped;
    # this keeps the output shape static (no data-dependent indexing, no host sync).
    offsets = torch.arange(blink_len, device=out_device)
    positions = torch.where((starts < last_start)[:, None], starts[:, None] + offsets, num_frames)
    schedule = torch.zeros(num_frames + 1, dtype=torch.long, device=out_device)
    schedule.scatter_(0, positions.flatten(), offsets.expand_as(positions).flatten())
    return schedule[:num_frames]
