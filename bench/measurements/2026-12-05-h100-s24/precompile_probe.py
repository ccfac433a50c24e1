"""Diagnostic for the device (session 24): torch.compile's ahead-of-time path
(``torch.compile(module, fullgraph=True).forward.aot_compile`` -> ``save_compiled_function``,
``torch.compiler.load_compiled_function`` in a new process), which stays in Python (no AOTI
loader) -- does the warp+decode step load there, and what does a new process pay to get it?
``save`` in one process, ``load`` in a fresh one; JSON lines on stdout."""
import json, os, sys, time
T0 = time.perf_counter()
import torch
T_IMPORT = time.perf_counter() - T0
sys.path.insert(0, os.getcwd())
from ditto_core.models.ditto_models import random_ditto_models
from ditto_core.models.triton_kernels import register_triton_operators, triton_kernels_supported, use_triton_kernels_
from ditto_core.render.aot_package import _Step

ART = os.environ.get("PRECOMPILE_FILE", "/tmp/precompile/warp_decode.bin")
dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
half = torch.float16 if dev.type == "cuda" else torch.float32
batch = int(os.environ.get("PROBE_BATCH", "32"))
sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)


def inputs():
    g = torch.Generator(dev).manual_seed(0)
    f_s = torch.randn(1, 32, 16, 64, 64, device=dev, generator=g).to(half)
    kp_s = torch.randn(batch, 21, 3, device=dev, generator=g) * 0.1
    return f_s, kp_s, kp_s + 0.01 * torch.randn(kp_s.shape, device=dev, generator=g)


out = {"import_torch_s": T_IMPORT, "torch": torch.__version__}
t = time.perf_counter()
m = random_ditto_models(dev, half, 0)
triton_ok = triton_kernels_supported(dev, half)[0]
out["triton_layers"] = use_triton_kernels_(m.warp_network, triton_ok) if triton_ok else 0
step = _Step(m.warp_network, m.decoder).eval()
args = inputs()
sync(); out["models_s"] = time.perf_counter() - t
with torch.no_grad():
    ref = step(*args).float()
if sys.argv[1] == "save":
    register_triton_operators()
    t = time.perf_counter()
    with torch.no_grad():
        compiled = torch.compile(step, fullgraph=True).forward.aot_compile((args, {}))
    out["aot_compile_s"] = time.perf_counter() - t
    os.makedirs(os.path.dirname(ART), exist_ok=True)
    t = time.perf_counter()
    compiled.save_compiled_function(ART)
    out["save_s"], out["bytes"] = time.perf_counter() - t, os.path.getsize(ART)
    with torch.no_grad():
        got = compiled(step, *args).float()
    out["rel_l2_same_process"] = float((got - ref).norm() / ref.norm())
else:
    t = time.perf_counter()
    with open(ART, "rb") as f:
        loaded = torch.compiler.load_compiled_function(f)
    out["load_s"] = time.perf_counter() - t
    out["dynamo_imported_by_load"] = "torch._dynamo" in sys.modules
    with torch.no_grad():
        t = time.perf_counter()
        got = loaded(step, *args).float(); sync()
        out["first_call_s"] = time.perf_counter() - t
        out["rel_l2"] = float((got - ref).norm() / ref.norm())
        if dev.type == "cuda":
            from ditto_core.cuda_graphs import CapturedCall
            t = time.perf_counter()
            graph = CapturedCall(lambda *a: loaded(step, *a), args, torch.cuda.Stream(dev))
            graph.capture(); sync()
            out["capture_s"] = time.perf_counter() - t
            runs = {"graph": lambda: graph.replay(args), "loaded": lambda: loaded(step, *args), "eager": lambda: step(*args)}
        else:
            runs = {"loaded": lambda: loaded(step, *args), "eager": lambda: step(*args)}
        for name, fn in runs.items():
            fn(); sync()
            t = time.perf_counter()
            for _ in range(10):
                fn()
            sync()
            out[f"{name}_ms_per_frame"] = (time.perf_counter() - t) / 10 / batch * 1e3
    out["since_start_s"] = time.perf_counter() - T0
print("RESULT " + json.dumps(out), flush=True)
