"""Session 39: how much of a new process's first cuDNN / cuBLAS calls is loading libraries.

Each variant runs in a child process of its own (alternating, three rounds): import torch,
start CUDA, then the first fp16 conv2d (cuDNN), matmul (cuBLAS) and attention, each timed to
its synchronisation. "preload" first dlopens every cuDNN / cuBLAS shared library of the
installation (what a thread could do while the models load: dlopen releases the GIL) and times it.
"""
import ctypes
import glob
import json
import os
import subprocess
import sys
import time


def child(mode: str) -> dict:
    t0 = time.perf_counter()
    import torch
    import torch.nn.functional as F
    out = {"import_torch": time.perf_counter() - t0}
    t = time.perf_counter(); torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
    out["cuda_start"] = time.perf_counter() - t
    if mode == "preload":
        site = os.path.dirname(os.path.dirname(torch.__file__))
        libs = sorted(glob.glob(f"{site}/nvidia/cudnn/lib/libcudnn*.so*") + glob.glob(f"{site}/nvidia/cublas/lib/libcublas*.so*"))
        t = time.perf_counter()
        for lib in libs:
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        out["dlopen"] = time.perf_counter() - t
        out["libs"] = [os.path.basename(p) for p in libs]
    x = torch.randn(8, 64, 128, 128, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    a = torch.randn(512, 1024, device="cuda", dtype=torch.half)
    q = torch.randn(4, 8, 80, 64, device="cuda", dtype=torch.half)
    torch.cuda.synchronize()
    for name, op in (("conv", lambda: F.conv2d(x, w, padding=1)), ("matmul", lambda: a @ a.T),
                     ("attention", lambda: F.scaled_dot_product_attention(q, q, q)),
                     ("conv_again", lambda: F.conv2d(x, w, padding=1))):
        t = time.perf_counter(); op(); torch.cuda.synchronize(); out[name] = time.perf_counter() - t
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(child(sys.argv[1])))
        sys.exit(0)
    results = {"plain": [], "preload": []}
    for _ in range(3):
        for mode in results:
            run = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True, timeout=120)
            if run.returncode:
                print(mode, "failed", run.stderr[-500:]); continue
            results[mode].append(json.loads(run.stdout.strip().splitlines()[-1]))
    for mode, runs in results.items():
        keys = [k for k in runs[0] if k != "libs"] if runs else []
        print(mode, {k: [round(r[k], 3) for r in runs] for k in keys})
    if results["preload"]:
        print("libs", results["preload"][0]["libs"])
