"""Does an AOTInductor CUDA package load in a fresh process on this machine at all?

A two-conv fp16 module, packaged with its weights baked in and without them, each loaded in a
new interpreter (fault handler on, so a crash prints its Python stack) with the single- and
the multi-threaded runner. Isolates the crash of tests/test_aot_packages.py's second process
from our networks and Triton operators.

    python bench/measurements/2026-12-03-h200-s12/aot_probe.py DIR
"""
import json
import os
import subprocess
import sys
import time

import torch
from torch import nn

DEVICE = os.environ.get("PROBE_DEVICE", "cuda")  # cpu: to check the script itself


def module() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 3, 1)).to(DEVICE, torch.half).eval()


def build(folder: str) -> None:
    net, x = module(), torch.randn(4, 8, 64, 64, device=DEVICE, dtype=torch.half)
    program = torch.export.export(net, (x,), strict=False)
    for style, baked in (("baked", True), ("external", False)):
        start = time.perf_counter()
        torch._inductor.aoti_compile_and_package(program, package_path=f"{folder}/{style}.pt2",
                                                 inductor_configs={"aot_inductor.package_constants_in_so": baked})
        print(f"built {style} in {time.perf_counter() - start:.1f} s", flush=True)
    torch.save(net(x).float().cpu(), f"{folder}/want.pt")
    torch.save(x.cpu(), f"{folder}/x.pt")


def load(folder: str, style: str, runner: str) -> None:
    start = time.perf_counter()
    loaded = torch._inductor.aoti_load_package(f"{folder}/{style}.pt2", run_single_threaded=runner == "single",
                                               device_index=0 if DEVICE == "cuda" else -1)
    print("loaded", flush=True)
    if style == "external":
        tensors = dict(module().state_dict())
        loaded.load_constants({n: tensors[n] for n in loaded.get_constant_fqns()}, check_full_update=True,
                              user_managed=True)
        print("constants set", flush=True)
    x = torch.load(f"{folder}/x.pt", weights_only=True).to(DEVICE)
    out = loaded(x)
    out = out[0] if isinstance(out, (list, tuple)) else out
    want = torch.load(f"{folder}/want.pt", weights_only=True)
    err = ((out.float().cpu() - want).norm() / want.norm()).item()
    print(json.dumps({"seconds": time.perf_counter() - start, "rel_l2": err}), flush=True)


def main() -> None:
    if sys.argv[1] == "build":
        return build(sys.argv[2])
    if sys.argv[1] == "load":
        return load(*sys.argv[2:5])
    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    steps = [["build", folder]] + [["load", folder, s, r] for s in ("baked", "external") for r in ("single", "multi")]
    results = []
    for step in steps:
        done = subprocess.run([sys.executable, __file__, *step], env=env, capture_output=True, text=True, timeout=300)
        results.append({"step": step[0:1] + step[2:], "rc": done.returncode, "stdout": done.stdout[-800:],
                        "stderr": done.stderr[-2500:]})
        print(json.dumps(results[-1]), flush=True)
        if step[0] == "build" and done.returncode:
            break
    print("SUMMARY " + json.dumps([(r["step"], r["rc"]) for r in results]))


if __name__ == "__main__":
    main()
