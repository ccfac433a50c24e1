"""Avatar cache hit latency: entry load to the device, frame hashing, and a full cached
``register_avatar`` call. Prints one JSON object (and writes it with ``--out``).

    python bench/bench_cache.py [--device cuda] [--frames 1] [--dtype float16] [--repeats 20]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ditto_core.registration import AvatarCache, RegistrationOptions, register_avatar  # noqa: E402
from ditto_core.registration.cache import cache_key  # noqa: E402

_MOTION_WIDTHS = (66, 66, 66, 3, 63, 1, 63)


class _Appearance(nn.Module):
    """Stand-in with the real output shape; only the first (missing) call ever runs it."""

    def forward(self, x):
        return x.new_zeros(x.shape[0], 32, 16, 64, 64)


class _Motion(nn.Module):
    def forward(self, x):
        return tuple(x.new_zeros(x.shape[0], w) for w in _MOTION_WIDTHS)


def _timed(fn, repeats: int, device: torch.device) -> list[float]:
    fn()  # warm-up: page cache, allocator, lazy imports
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        out.append((time.perf_counter() - start) * 1e3)
    return out


def _stats(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"median_ms": round(ms[len(ms) // 2], 3), "p90_ms": round(ms[int(len(ms) * 0.9)], 3),
            "min_ms": round(ms[0], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--frames", type=int, default=1, help="source frames (1 = still portrait)")
    parser.add_argument("--size", type=int, default=1432, help="square source frame side in pixels")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)

    frames = np.random.default_rng(0).integers(0, 256, (args.frames, args.size, args.size, 3), dtype=np.uint8)
    models = SimpleNamespace(appearance_extractor=_Appearance(), motion_extractor=_Motion(), identity="bench")
    aux = SimpleNamespace(landmark478=None)
    options = RegistrationOptions(detect_face=False)
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eye defaults: no landmarker in this bench
        cache = AvatarCache(root)

        def register():
            return register_avatar(frames, models, aux, options, device=device, dtype=dtype, cache=cache)

        key = register().cache_key
        entry_bytes = cache.paths(key)[0].stat().st_size
        load_ms = _timed(lambda: cache.load(key, device), args.repeats, device)
        settings = {**options.fingerprint(), "dtype": str(dtype), "is_image": args.frames == 1}
        hash_ms = _timed(lambda: cache_key(frames, settings, "bench|"), args.repeats, device)
        hit_ms = _timed(register, args.repeats, device)

    result = {
        "benchmark": "avatar_cache_hit",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "frames": args.frames,
        "frame_size": args.size,
        "f_s_dtype": args.dtype,
        "entry_mib": round(entry_bytes / 2**20, 2),
        "load_to_device": _stats(load_ms),
        "hash_frames": _stats(hash_ms),
        "register_avatar_hit": _stats(hit_ms),
        "repeats": args.repeats,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
