"""Per-frame put-back time on a 1080x1920 frame: OpenCV (CPU) vs PyTorch grid_sample vs Triton.

The GPU paths run batched, as in the pipeline: one shared source frame, N renders selected
through ``source_index``. Prints one JSON object (and writes it with ``--out``).

    python -m bench.bench_putback [--batch 32] [--iters 20] [--out results/putback.json]
"""
from __future__ import annotations

import argparse
import platform
import statistics
from pathlib import Path

import cv2
import numpy as np
import torch


from ditto_core.render.putback import _triton_impl, paste_back, paste_back_cv2

from .bench_common import cuda_event_times, emit, wall_times

HEIGHT, WIDTH, RENDER = 1080, 1920, 512


def crop_to_frame() -> torch.Tensor:
    """A face-sized crop: 512 px render scaled 1.6x, rotated 5 degrees, centred in the frame."""
    affine = cv2.getRotationMatrix2D((255.5, 255.5), 5.0, 1.6)
    affine[:, 2] += np.array([WIDTH / 2, HEIGHT / 2]) - 255.5
    return torch.from_numpy(np.vstack([affine, [0, 0, 1]])).float()


def summary(times: list[float], frames: int) -> dict:
    per_frame = [t / frames for t in times]
    return {
        "frames_per_call": frames,
        "ms_per_frame_median": 1000 * statistics.median(per_frame),
        "ms_per_frame_min": 1000 * min(per_frame),
        "frames_per_second": frames / statistics.median(times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="renders per GPU call")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--cpu-iters", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(0)
    frame = torch.randint(0, 256, (1, HEIGHT, WIDTH, 3), dtype=torch.uint8, generator=gen)
    renders = torch.rand(args.batch, 3, RENDER, RENDER, generator=gen)
    M_c2o = crop_to_frame()[None]
    index = torch.zeros(args.batch, dtype=torch.int64)

    frame_np, render_np, M_np = frame[0].numpy(), (renders[0] * 255).permute(1, 2, 0).numpy(), M_c2o[0].numpy()
    results: dict = {
        "frame": [HEIGHT, WIDTH],
        "render": RENDER,
        "torch": torch.__version__,
        "opencv": cv2.__version__,
        "cpu": platform.processor() or platform.machine(),
        "opencv_cpu": summary(wall_times(lambda: paste_back_cv2(frame_np, render_np, M_np), args.cpu_iters), 1),
        "torch_cpu": summary(
            wall_times(lambda: paste_back(frame, renders[:4], M_c2o, index[:4], backend="torch"), args.cpu_iters), 4
        ),
    }

    if torch.cuda.is_available():
        device = torch.device("cuda")
        results["gpu"] = torch.cuda.get_device_name(device)
        frame_d, renders_d, M_d, index_d = (t.to(device) for t in (frame, renders.half(), M_c2o, index))
        out = torch.empty(args.batch, HEIGHT, WIDTH, 3, dtype=torch.uint8, device=device)
        for backend in ("torch", "triton"):
            if backend == "triton" and _triton_impl() is None:
                results["triton_cuda"] = "triton not importable"
                continue
            call = lambda b=backend: paste_back(frame_d, renders_d, M_d, index_d, out=out, backend=b)  # noqa: E731
            results[f"{backend}_cuda"] = summary([t / 1000 for t in cuda_event_times(call, args.iters, warmup=3)], args.batch)
        # Bytes the fused kernel must move at least: every output pixel written, the source
        # frame read (cached across the batch), renders read: a bandwidth yardstick.
        results["min_bytes_per_frame"] = HEIGHT * WIDTH * 3 + 3 * RENDER * RENDER * 2

    emit(results, args.out)


if __name__ == "__main__":
    main()
