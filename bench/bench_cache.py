"""Avatar cache hit latency: entry load to the device, frame hashing, and a full cached
``register_avatar`` call. Prints one JSON object (and writes it with ``--out``).

    python -m bench.bench_cache [--device cuda] [--frames 1] [--dtype float16] [--repeats 20]
"""
from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn


from ditto_core.registration import AvatarCache, RegistrationOptions, register_avatar
from ditto_core.registration.cache import cache_key

from .bench_common import emit, summary_ms, wall_times

_MOTION_WIDTHS = (66, 66, 66, 3, 63, 1, 63)


class _Appearance(nn.Module):
    """Stand-in with the real output shape; only the first (missing) call ever runs it."""

    def forward(self, x):
        return x.new_zeros(x.shape[0], 32, 16, 64, 64)


class _Motion(nn.Module):
    def forward(self, x):
        return tuple(x.new_zeros(x.shape[0], w) for w in _MOTION_WIDTHS)


def _timed_ms(fn, repeats: int, device: torch.device) -> dict[str, float]:
    return summary_ms([1000 * t for t in wall_times(fn, repeats, device)])


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
        load = _timed_ms(lambda: cache.load(key, device), args.repeats, device)
        settings = {**options.fingerprint(), "dtype": str(dtype), "is_image": args.frames == 1}
        hashing = _timed_ms(lambda: cache_key(frames, settings, "bench|"), args.repeats, device)
        hit = _timed_ms(register, args.repeats, device)

    result = {
        "benchmark": "avatar_cache_hit",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "frames": args.frames,
        "frame_size": args.size,
        "f_s_dtype": args.dtype,
        "entry_mib": round(entry_bytes / 2**20, 2),
        "load_to_device": load,
        "hash_frames": hashing,
        "register_avatar_hit": hit,
        "repeats": args.repeats,
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
