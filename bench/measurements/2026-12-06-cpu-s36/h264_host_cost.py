"""A live H.264 stream's host work per frame, before and after the render thread hands it yuv420p
made on the device: RGB converted by swscale on the encoder's thread (before: PyAV's default
conversion; the RGB path kept for other renderers: BT.709 with area chroma) against the packed
yuv420p wrapped as it is. Each variant encodes its own x264 stream (ultrafast, zerolatency, as
``H264Encoder``), alternating, three rounds. JSON on stdout.

    python bench/measurements/2026-12-06-cpu-s36/h264_host_cost.py > result.json
"""
import json
import time
from fractions import Fraction

import av
import cv2
import numpy as np
import torch

from ditto_core.video.colour import rgb_to_yuv420p, tag_bt709
from ditto_core.video.encoder import rgb_picture, yuv420p_picture

SIZES = ((512, 512), (720, 1280), (1080, 1920))
FRAMES, ROUNDS = 40, 3


def pictures(height: int, width: int) -> np.ndarray:
    """Slowly moving smooth RGB frames (x264's cost depends on content and motion)."""
    coarse = np.random.default_rng(0).integers(0, 256, (height // 16 + 8, width // 16 + 8, 3), dtype=np.uint8)
    big = cv2.resize(coarse, (width + 128, height + 128), interpolation=cv2.INTER_CUBIC)
    return np.stack([big[i : i + height, i : i + width] for i in range(FRAMES)])


def codec(height: int, width: int, tagged: bool):
    context = av.CodecContext.create("libx264", "w")
    context.width, context.height, context.pix_fmt = width, height, "yuv420p"
    context.time_base = Fraction(1, 25)
    context.options = {"preset": "ultrafast", "tune": "zerolatency", "g": "50", "forced-idr": "1"}
    if tagged:
        tag_bt709(context)
    return context


def run(make_picture, frames, context) -> tuple[float, float]:
    """(ms a frame for the picture, ms a frame for picture + encode)."""
    convert = total = 0.0
    for index, pixels in enumerate(frames):
        start = time.perf_counter()
        picture = make_picture(pixels)
        made = time.perf_counter()
        picture.pts = index
        context.encode(picture)
        done = time.perf_counter()
        convert, total = convert + made - start, total + done - start
    return convert / len(frames) * 1000, total / len(frames) * 1000


def main() -> None:
    torch.set_num_threads(1)
    reformatter = av.video.reformatter.VideoReformatter()
    variants = {
        "rgb_default_before": (lambda p: av.VideoFrame.from_ndarray(p, format="rgb24").reformat(format="yuv420p"), False),
        "rgb_bt709_area": (lambda p: rgb_picture(reformatter, p), True),
        "yuv420p_from_device": (yuv420p_picture, True),
    }
    rows = []
    for height, width in SIZES:
        rgb = pictures(height, width)
        yuv = rgb_to_yuv420p(torch.from_numpy(rgb), backend="torch").numpy()  # made on the device in the runtime
        results = {name: [] for name in variants}
        for _ in range(ROUNDS):
            for name, (make, tagged) in variants.items():
                frames = yuv if name == "yuv420p_from_device" else rgb
                results[name].append([round(v, 3) for v in run(make, frames, codec(height, width, tagged))])
        rows.append({"height": height, "width": width,
                     **{f"{name}_picture_and_total_ms": values for name, values in results.items()}})
    print(json.dumps({"opencv": cv2.__version__, "pyav": av.__version__, "frames": FRAMES, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
