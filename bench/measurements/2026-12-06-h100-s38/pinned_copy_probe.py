"""Session 38: a live render pass's frames to the host, pageable against page-locked memory.

``to_host`` as the render thread calls it, for a pass of 5, 20 and 40 frames at 512x512 (RGB for
JPEG, packed yuv420p for H.264), each copy issued behind a short kernel as after a render; the
median of 30 of the wall time the render thread spends in it. Prints one JSON line.

Needs ``pinned_to_host.patch`` applied (``to_host(..., pinned=)``). Run on the device from the
repository root with ``PYTHONPATH=$PWD``.
"""
from __future__ import annotations

import json
import statistics
import time

import torch

from ditto_core.live.output_frames import to_host


def main() -> None:
    device = torch.device("cuda")
    result = {"device": torch.cuda.get_device_name(device)}
    for name, shape in (("rgb", (512, 512, 3)), ("yuv420p", (768, 512))):
        for frames in (5, 20, 40):
            source = torch.randint(0, 256, (frames, *shape), dtype=torch.uint8, device=device)
            for pinned in (False, True):
                times = []
                for _ in range(33):
                    torch.cuda.synchronize(device)
                    ready = source.add(1)  # made just before, as a pass's last kernel makes its frames
                    start = time.perf_counter()
                    host = to_host([ready], pinned=[pinned])
                    times.append(time.perf_counter() - start)
                    assert host[0].is_pinned() == pinned
                result[f"{name}_{frames}_{'pinned' if pinned else 'pageable'}_ms"] = round(
                    1000 * statistics.median(times[3:]), 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
