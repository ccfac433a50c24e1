"""Diagnostic (not committed): does an AOTI package of the warp+decode step with its weights baked in
(package_constants_in_so=True) load and run on CUDA, how fast, and how long does a new process take to load it?"""
import json, os, subprocess, sys, time
import torch
out = {}
if sys.argv[1] == "load":
    t = time.perf_counter()
    runner = torch._inductor.aoti_load_package(sys.argv[2], run_single_threaded=True)
    out["load_s"] = time.perf_counter() - t
    f_s = torch.randn(1, 32, 16, 64, 64, device="cuda", dtype=torch.float16)
    kp = torch.randn(32, 21, 3, device="cuda") * 0.1
    t = time.perf_counter(); runner(f_s, kp, kp); torch.cuda.synchronize(); out["first_call_s"] = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(13): runner(f_s, kp, kp)
    torch.cuda.synchronize(); out["13_batches_s"] = time.perf_counter() - t
    print("RESULT", json.dumps(out)); sys.exit(0)
from ditto_core.models.ditto_models import random_ditto_models
from ditto_core.render.warp_decode import WarpDecodeEngine
from ditto_core.render.aot_package import _Step
m = random_ditto_models(torch.device("cuda"), torch.float16, 0)
engine = WarpDecodeEngine(m.warp_network, m.decoder, batch_size=32, warmup="foreground")
out["triton_kernels"] = engine.stats.triton_kernels
step = _Step(engine.warp_network, engine.decoder)
f_s = torch.randn(1, 32, 16, 64, 64, device="cuda", dtype=torch.float16)
kp_s = torch.randn(32, 21, 3, device="cuda") * 0.1
kp_d = kp_s + 0.01 * torch.randn_like(kp_s)
with torch.no_grad():
    ref = step(f_s, kp_s, kp_d).float()
    t = time.perf_counter()
    program = torch.export.export(step, (f_s, kp_s, kp_d), strict=False)
    out["export_s"] = time.perf_counter() - t
    t = time.perf_counter()
    path = torch._inductor.aoti_compile_and_package(program, package_path="/tmp/warp_decode_baked.pt2",
                                                    inductor_configs={"aot_inductor.package_constants_in_so": True})
    out["compile_s"] = time.perf_counter() - t
out["bytes"] = os.path.getsize(path)
print(json.dumps(out), flush=True)
runner = torch._inductor.aoti_load_package(path, run_single_threaded=True)
got = runner(f_s, kp_s, kp_d).float()
out["rel_l2_vs_eager_fp16"] = float((got - ref).norm() / ref.norm())
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(13): runner(f_s, kp_s, kp_d)
torch.cuda.synchronize(); out["13_batches_s_same_process"] = time.perf_counter() - t
eng = time.perf_counter()
with torch.no_grad():
    for _ in range(13): step(f_s, kp_s, kp_d)
torch.cuda.synchronize(); out["13_batches_s_eager"] = time.perf_counter() - eng
print(json.dumps(out), flush=True)
t = time.time()
r = subprocess.run([sys.executable, __file__, "load", path], capture_output=True, text=True, timeout=120)
out["new_process_wall_s"] = time.time() - t
out["new_process"] = next((json.loads(l[7:]) for l in r.stdout.splitlines() if l.startswith("RESULT ")), r.stderr[-1500:])
print(json.dumps(out, indent=1))
open(os.environ.get("OUT", "/tmp") + "/aot_probe.json", "w").write(json.dumps(out, indent=1))
