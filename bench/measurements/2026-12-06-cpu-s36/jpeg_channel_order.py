"""A live JPEG frame's encode, the two ways of handing OpenCV BGR: the reversed-channel view the
runtime used (``image[:, :, ::-1]``, which imencode copies first) against ``cv2.cvtColor``.
Both in one run, alternating, one OpenCV thread (as each of the runtime's encoder threads);
the JPEG bytes are checked equal. JSON on stdout.

    python bench/measurements/2026-12-06-cpu-s36/jpeg_channel_order.py > result.json
"""
import json
import platform
import time

import cv2
import numpy as np

SIZES = ((512, 512), (720, 1280), (1080, 1920))
QUALITY = 85  # StreamConfig's default
REPEATS, ROUNDS = 40, 3


def frame(height: int, width: int) -> np.ndarray:
    """A smooth RGB picture (JPEG's cost depends on content; noise would be the worst case)."""
    coarse = np.random.default_rng(0).integers(0, 256, (height // 16, width // 16, 3), dtype=np.uint8)
    return cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)


def view(rgb: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, QUALITY])[1].tobytes()


def cvt(rgb: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, QUALITY])[1].tobytes()


def ms_per_frame(encode, rgb: np.ndarray) -> float:
    start = time.perf_counter()
    for _ in range(REPEATS):
        encode(rgb)
    return (time.perf_counter() - start) / REPEATS * 1000


def main() -> None:
    cv2.setNumThreads(1)
    rows = []
    for height, width in SIZES:
        rgb = frame(height, width)
        assert view(rgb) == cvt(rgb), "the two ways must give the same JPEG"
        times = {"view": [], "cvtColor": []}
        for _ in range(ROUNDS):
            times["view"].append(ms_per_frame(view, rgb))
            times["cvtColor"].append(ms_per_frame(cvt, rgb))
        rows.append({"height": height, "width": width,
                     **{f"{name}_ms": [round(t, 3) for t in values] for name, values in times.items()},
                     "speedup_median": round(sorted(times["view"])[1] / sorted(times["cvtColor"])[1], 2)})
    print(json.dumps({"cpu": platform.processor() or platform.machine(), "opencv": cv2.__version__,
                      "quality": QUALITY, "repeats": REPEATS, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
