"""Write a HuBERT-large with the architecture and interface of Ditto's HuBERT, random weights.

    python -m bench.make_hubert_large [--out FILE] [--seed 0] [--fixed-length]

The official ``hubert_streaming_fix_kv.onnx`` cannot be redistributed here; benchmarks need a
graph of its size and shape: ``input_values`` float32 ``(1, samples)`` -> ``encoding_out``
float32 ``(rows, 1024)``, HuBERT-large (24 layers, 1024 wide, 315 M parameters, positional conv
under weight norm), exported by the TorchScript exporter with constant folding as a typical
export is. Written once: when ``FILE`` exists and its digest matches the record beside it
(``FILE.json``), nothing is done; both files are published atomically. Prints the path.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from ditto_core.atomic_files import atomic_write, atomic_write_bytes, file_sha256
from ditto_core.models.hubert import HubertConfig
from ditto_core.models.hubert_onnx_export import export_hubert_onnx, random_hubert

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "hubert_large" / "hubert_streaming_fix_kv.onnx"
WINDOW_SAMPLES = 6480


def _record_path(out: Path) -> Path:
    return out.with_name(out.name + ".json")


def _recipe(config: HubertConfig, seed: int, fixed_length: bool) -> dict:
    return {"config": dataclasses.asdict(config), "seed": seed,
            "input_samples": WINDOW_SAMPLES if fixed_length else "dynamic", "exporter": "torchscript, folded"}


def is_current(out: Path, recipe: dict) -> bool:
    """Whether ``out`` is the file its record describes, made by ``recipe``."""
    record_file = _record_path(out)
    if not (out.is_file() and record_file.is_file()):
        return False
    try:
        record = json.loads(record_file.read_text())
    except ValueError:
        return False
    return json.loads(json.dumps(recipe)) == record.get("recipe") and record.get("sha256") == file_sha256(out)


def make_hubert_large(out: Path = DEFAULT_OUT, seed: int = 0, fixed_length: bool = False,
                      config: HubertConfig = HubertConfig()) -> Path:
    """Write (or keep) the HuBERT ONNX file at ``out`` and return its path.

    ``config``: HuBERT-large unless a test asks for a small one.
    """
    recipe = _recipe(config, seed, fixed_length)
    if is_current(out, recipe):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    model = random_hubert(config, seed)
    atomic_write(out, lambda tmp: export_hubert_onnx(model, tmp, num_samples=WINDOW_SAMPLES if fixed_length else None))
    record = {"recipe": recipe, "sha256": file_sha256(out), "bytes": out.stat().st_size}
    atomic_write_bytes(_record_path(out), (json.dumps(record, indent=2) + "\n").encode())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fixed-length", action="store_true", help=f"a fixed input of {WINDOW_SAMPLES} samples")
    args = parser.parse_args()
    start = time.perf_counter()
    path = make_hubert_large(args.out, args.seed, args.fixed_length)
    print(f"{path} ({path.stat().st_size / 1e9:.2f} GB, {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
