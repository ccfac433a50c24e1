"""x264 alone on the example's frame size: frame threads against slice threads (session 49).

The warm CLI render waits about 0.9 s of its 1.35 s for x264 (ultrafast, one instance, 14 frame
threads on a 16-core host). This times x264 alone, from yuv420p frames in host memory, for 394
frames of 1432x1432 made from the example portrait with its middle moving as a face does (a static
background, a moving centre), or the frames of a render (``--render``: a random-weights MP4, whose
face region is high-frequency noise), each variant twice, in turn. Not shipped code: a probe.

    python bench/measurements/2026-12-07-h100-s49/x264_threads_probe.py --out probe.json
"""
import argparse
import json
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

VARIANTS = {  # name: (thread_type, thread_count, extra x264 options)
    "frame14": ("FRAME", 14, {}),
    "frame8": ("FRAME", 8, {}),
    "frame16": ("FRAME", 16, {}),
    "frame_auto": ("FRAME", 0, {}),
    "slice14": ("SLICE", 14, {}),
    "slice16": ("SLICE", 16, {}),
    "frame2": ("FRAME", 2, {}),
}


def render_frames(mp4: Path, count: int) -> list:
    """The frames of a render (a random-weights one, say), as yuv420p, repeated up to ``count``."""
    with av.open(str(mp4)) as container:
        decoded = [f.reformat(format="yuv420p") for f in container.decode(video=0)]
    return [decoded[i % len(decoded)] for i in range(count)]


def frames(portrait: Path, count: int) -> list:
    image = av.open(str(portrait)).decode(video=0).__next__().to_ndarray(format="rgb24")
    h, w = image.shape[0] // 2 * 2, image.shape[1] // 2 * 2
    image = np.ascontiguousarray(image[:h, :w])
    out = []
    for i in range(count):
        frame = image.copy()
        dy, dx = int(6 * np.sin(i / 5)), int(4 * np.cos(i / 7))
        frame[h // 4:3 * h // 4, w // 4:3 * w // 4] = np.roll(image[h // 4:3 * h // 4, w // 4:3 * w // 4], (dy, dx), (0, 1))
        out.append(av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format="yuv420p"))
    return out


def encode(pictures: list, variant: str, path: Path) -> float:
    thread_type, threads, extra = VARIANTS[variant]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.height, stream.width = pictures[0].height, pictures[0].width
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, 25)
        stream.options = {"crf": "18", "preset": "ultrafast", **extra}
        stream.codec_context.thread_type = thread_type
        stream.codec_context.thread_count = threads
        stream.codec_context.open()
        start = time.perf_counter()
        for index, picture in enumerate(pictures):
            picture.pts = index
            container.mux(stream.encode(picture))
        container.mux(stream.encode(None))
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--portrait", type=Path, default=Path(".carry/shared/data/ditto_example/portrait.jpg"))
    parser.add_argument("--frames", type=int, default=394)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--render", type=Path, help="encode this MP4's frames (looped) instead of the moving portrait")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    pictures = render_frames(args.render, args.frames) if args.render else frames(args.portrait, args.frames)
    results = {name: [] for name in args.variants}
    sizes = {}
    for _ in range(args.rounds):
        for name in args.variants:
            path = Path(f"/tmp/x264_probe_{name}.mp4")
            seconds = encode(pictures, name, path)
            results[name].append(round(args.frames / seconds, 1))
            sizes[name] = path.stat().st_size
            print(name, "fps", results[name][-1], "bytes", sizes[name], flush=True)
    summary = {"content": str(args.render or "moving portrait"), "frames": args.frames, "size": [pictures[0].height, pictures[0].width], "fps": results, "bytes": sizes}
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
