"""Diagnostic for the device (session 24): where does loading an AOTInductor package crash the
process on the device's torch? Each variant runs in a child of its own (a crash takes only it):
a tiny conv net with its weights in the .so (loaded single- and multi-threaded), the same without
(our way: constants handed in, user-managed), then the warp+decode step at batch 8 through
``load_step`` with our Triton kernels off and on. JSON to $OUT/aot_bisect.json."""
import json, os, subprocess, sys, time
from pathlib import Path

VARIANTS = tuple(os.environ.get("PROBE_VARIANTS", "tiny_baked_st tiny_baked_mt tiny_user_st wd_triton_off wd_triton_on").split())


def child(variant: str) -> dict:
    import torch
    import torch._inductor
    out: dict = {}
    sync = lambda: torch.cuda.synchronize() if torch.cuda.is_available() else None
    dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
    half = torch.float16 if dev.type == "cuda" else torch.float32
    if variant.startswith("tiny"):
        net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
                                  torch.nn.Conv2d(16, 3, 3, padding=1)).to(dev, half).eval()
        x = torch.randn(4, 8, 64, 64, device=dev, dtype=half)
        with torch.no_grad():
            ref = net(x).float()
            program = torch.export.export(net, (x,), strict=False)
            path = f"/tmp/aotb/{variant}.pt2"
            os.makedirs("/tmp/aotb", exist_ok=True)
            t = time.perf_counter()
            torch._inductor.aoti_compile_and_package(program, package_path=path, inductor_configs={
                "aot_inductor.package_constants_in_so": variant != "tiny_user_st"})
            out["compile_s"] = time.perf_counter() - t
        print("built", flush=True)
        t = time.perf_counter()
        loaded = torch._inductor.aoti_load_package(path, run_single_threaded=variant.endswith("_st"))
        out["load_s"] = time.perf_counter() - t
        print("loaded", flush=True)
        if variant == "tiny_user_st":
            params = dict(net.named_parameters())
            wanted = loaded.get_constant_fqns()
            out["wanted"] = wanted
            loaded.load_constants({n: params[n] for n in wanted}, check_full_update=True, user_managed=True)
        got = loaded(x).float()
        out["rel_l2"] = float((got - ref).norm() / ref.norm())
        return out
    sys.path.insert(0, os.getcwd())
    from ditto_core.aot_packages import PackageCache
    from ditto_core.models.ditto_models import random_ditto_models
    from ditto_core.models.triton_kernels import use_triton_kernels_
    from ditto_core.render.aot_package import load_step, warp_decode_step
    triton = variant == "wd_triton_on"
    m = random_ditto_models(dev, half, 0)
    out["triton_layers"] = use_triton_kernels_(m.warp_network, triton)
    batch = 8
    f_s = torch.randn(1, 32, 16, 64, 64, device=dev, dtype=half)
    kp_s = torch.randn(batch, 21, 3, device=dev) * 0.1
    kp_d = kp_s + 0.01 * torch.randn_like(kp_s)
    with torch.no_grad():
        ref = warp_decode_step(m.warp_network, m.decoder, f_s, kp_s, kp_d).float()
    t = time.perf_counter()
    step = load_step(PackageCache(Path(f"/tmp/aotb/cache_{variant}")), m.warp_network, m.decoder,
                     tuple(f_s.shape), batch, out["triton_layers"] if triton else 0, build=True)
    out["build_and_load_s"] = time.perf_counter() - t
    print("loaded", flush=True)
    with torch.no_grad():
        got = step(f_s, kp_s, kp_d).float()  # captured into a CUDA graph here
        out["rel_l2_first"] = float((got - ref).norm() / ref.norm())
        got = step(f_s, kp_s, kp_d).float()
        out["rel_l2_replay"] = float((got - ref).norm() / ref.norm())
        sync()
        for name, fn in (("package", lambda: step(f_s, kp_s, kp_d)),
                         ("eager", lambda: warp_decode_step(m.warp_network, m.decoder, f_s, kp_s, kp_d))):
            fn(); sync()
            t = time.perf_counter()
            for _ in range(20):
                fn()
            sync()
            out[f"{name}_ms_per_frame"] = (time.perf_counter() - t) / 20 / batch * 1e3
    # a new process loading the cached package, as a later CLI call would
    code = ("import time, torch, sys; t=time.perf_counter(); sys.path.insert(0, '.');"
            "from pathlib import Path; from ditto_core.aot_packages import PackageCache;"
            "from ditto_core.models.ditto_models import random_ditto_models;"
            "from ditto_core.models.triton_kernels import use_triton_kernels_;"
            "from ditto_core.render.aot_package import load_step;"
            f"m = random_ditto_models('{dev.type}', {str(half)}, 0); n = use_triton_kernels_(m.warp_network, {triton});"
            "t1=time.perf_counter();"
            f"s = load_step(PackageCache(Path('/tmp/aotb/cache_{variant}')), m.warp_network, m.decoder, (1,32,16,64,64), {batch}, n if {triton} else 0, build=False);"
            "t2=time.perf_counter(); "
            f"f=torch.zeros(1,32,16,64,64,device='{dev.type}',dtype={str(half)}); k=torch.zeros(8,21,3,device='{dev.type}');"
            "s(f,k,k); torch.cuda.synchronize() if torch.cuda.is_available() else None; t3=time.perf_counter();"
            "print('NEWPROC', s is not None, round(t2-t1,3), round(t3-t2,3), round(t3-t,3))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=150)
    out["new_process"] = [l for l in done.stdout.splitlines() if l.startswith("NEWPROC")] or done.stderr[-800:]
    out["new_process_rc"] = done.returncode
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print("RESULT " + json.dumps(child(sys.argv[1])), flush=True)
        sys.exit(0)
    results = {}
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    t = time.perf_counter()
    running = {v: subprocess.Popen([sys.executable, __file__, v], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env) for v in VARIANTS}  # at once: a crash takes only its child
    for variant, proc in running.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, float(os.environ.get("PROBE_SECONDS", "420")) - (time.perf_counter() - t)))
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            rc = "timeout"
        result = next((json.loads(l[7:]) for l in stdout.splitlines() if l.startswith("RESULT ")), None)
        results[variant] = {"rc": rc, "seconds": round(time.perf_counter() - t, 1), "result": result,
                            "progress": [l for l in stdout.splitlines() if l in ("built", "loaded")],
                            "stderr_tail": None if result else stderr[-2500:]}
        print(variant, json.dumps(results[variant])[:1500], flush=True)
        Path(os.environ.get("OUT", "/tmp"), "aot_bisect.json").write_text(json.dumps(results, indent=1))
