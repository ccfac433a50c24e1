"""Session 58: does a compiled LMDM sampler's CUDA graph survive another sampler, compiled from the
same code, being dropped?

Call 2 ran the LMDM sampler's GPU tests and then the live runtime's in one process: the live
stream's first window replay died with SIGSEGV inside ``CUDAGraph.replay`` (the live tests alone
passed in session 57). Triton unloads a kernel's CUDA module when its ``CompiledKernel`` is freed,
and a graph that recorded a launch of it then launches a function that no longer exists. Each
variant runs in a child of its own (its exit status is the answer: -11 is SIGSEGV):

  keep        two models, two compiled samplers (bf16, whole-window graphs), both kept
  drop_first  the first sampler and its model dropped before the second compiles (the tests' order)
  drop_after  the first dropped after the second has recorded its graph, then the second replays
  batches     one model and sampler, as a live runtime's warm-up: windows of batch 1 recorded, then
              of batch 2 (a new compile), then batch 1 replayed again
"""
import gc
import json
import subprocess
import sys
import time
import traceback

D, W = 265, 80


def child(variant: str) -> None:
    import torch

    from ditto_core.models.lmdm import LMDM
    from ditto_core.motion.lmdm_sampler import DDIMSampler

    gen = torch.Generator(device="cuda").manual_seed(0)
    try:  # who unloads a Triton kernel's module, and when (a graph that launched it then crashes)
        from triton import knobs

        def unloaded(module, function, name, *rest):
            frames = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in traceback.extract_stack(limit=14)[:-1]]
            print("unload", name, " < ".join(reversed(frames)), flush=True)

        hooks = knobs.runtime.kernel_unload_hook
        if hasattr(hooks, "add"):  # a chain of hooks in newer Triton
            hooks.add(unloaded)
        else:
            knobs.runtime.kernel_unload_hook = unloaded
    except (ImportError, AttributeError) as error:
        print("no unload hook:", error, flush=True)

    def window(sampler, batch=1):
        args = (torch.randn(batch, D, device="cuda", generator=gen), torch.randn(batch, W, 1103, device="cuda", generator=gen),
                torch.randn(batch, W, D, device="cuda", generator=gen),
                torch.randn(sampler.noise_shape(batch), device="cuda", generator=gen))
        return sampler.sample(*args)

    m1 = LMDM().cuda().eval().requires_grad_(False)
    s1 = DDIMSampler(m1, 25, precision="bf16", compile=True)
    window(s1), window(s1)
    if variant == "batches":
        window(s1, 2), window(s1, 2)
        print("batch 2 recorded", flush=True)
        for _ in range(5):
            out = window(s1)
        torch.cuda.synchronize()
        print("ok", variant, float(out.float().abs().mean()), flush=True)
        return
    if variant == "drop_first":
        del s1, m1
        gc.collect()
    m2 = LMDM().cuda().eval().requires_grad_(False)
    s2 = DDIMSampler(m2, 25, precision="bf16", compile=True)
    window(s2), window(s2)
    print("second recorded", flush=True)
    if variant == "drop_after":
        del s1, m1
        gc.collect()
        print("first dropped", flush=True)
    for _ in range(5):
        out = window(s2)
    torch.cuda.synchronize()
    print("ok", variant, float(out.float().abs().mean()), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1])
        sys.exit(0)
    results = {}
    for variant in ("batches", "drop_first", "drop_after", "keep"):
        start = time.perf_counter()
        try:
            run = subprocess.run([sys.executable, __file__, variant], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            print(variant, "timed out", flush=True)
            continue
        results[variant] = {"returncode": run.returncode, "seconds": round(time.perf_counter() - start, 1),
                            "stdout": run.stdout[-4000:], "stderr": run.stderr[-1500:]}
        print(variant, "exit", run.returncode, run.stdout.strip().splitlines()[-1:] if run.stdout else "", flush=True)
    print(json.dumps(results, indent=1))
