"""A new process's first LMDM windows: the window's CUDA graph against one step's graph replayed per step (session 50).

A new CLI process's motion stage takes about 0.5 s more than a warm one's (0.68 against 0.15 s on
an H100, session 49), and session 29 measured the window graph's recording at 0.44-0.50 s in such
a process. The recording pays for every one of the window's 25 steps (about 4,680 kernels): an
eager warm-up window, the capture's launches and the graph's instantiation. A graph of one step,
replayed once per step with a step counter on the device, records 1/25 of that. This times, in
fresh processes (each variant in a child of its own, in turn):

- ``window``: main's ``DDIMSampler`` (the window recorded at the first window);
- ``step``: the same sampler's eager prologue (condition, time embeddings) plus one recorded step
  that reads its step's time rows, constants and noise by a device index and advances it;
- ``eager``: no graph.

Each child loads the networks from ``--models`` as the CLI does (fp16, the LMDM in float32 with
TF32 matmuls, the CLI's ``auto``), samples 8 windows of different conditions with the same noise,
and saves the windows; the parent checks ``step`` and ``eager`` against ``window``. Not shipped
code: a probe.

    python bench/measurements/2026-12-07-h100-s50/lmdm_first_window_probe.py --models /tmp/models --out probe.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WINDOWS = 8
VARIANTS = ("window", "step", "eager")


def child(variant: str, models: Path, out: Path, device_name: str) -> None:
    start = time.perf_counter()
    import torch

    imported = time.perf_counter()
    from ditto_core.models.ditto_models import load_ditto_models
    from ditto_core.models.lmdm import LMDMTimeCondition
    from ditto_core.motion.lmdm_sampler import DDIMSampler, _matmul_precision

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    loaded_at = time.perf_counter()
    lmdm = load_ditto_models(models, device, torch.float16).lmdm
    sync()
    loaded = time.perf_counter()
    sampler = DDIMSampler(lmdm, steps=25, precision="tf32", cuda_graph=variant == "window")
    generator = torch.Generator(device).manual_seed(0)
    kp = torch.randn(1, 265, device=device, generator=generator)
    x_T = torch.randn(1, 80, 265, device=device, generator=generator)
    noise = torch.randn(24, 1, 80, 265, device=device, generator=generator)
    conds = [torch.randn(1, 80, lmdm.cond_dim, device=device, generator=generator) * 0.5 for _ in range(WINDOWS)]
    sync()

    step_graph = {}

    def step_sample(aud: torch.Tensor) -> torch.Tensor:
        """The window with its steps replayed from one step's graph (the prototype measured here)."""
        net, steps, b = sampler._net, sampler.steps, 1
        with torch.no_grad(), _matmul_precision(sampler.precision, device):
            condition = net.encode_guidance(kp.to(net.null_cond_embed.dtype), aud)
            every_t = sampler.timesteps.repeat_interleave(2 * b)
            tiled = type(condition)(condition.frame_term, condition.hidden.repeat(steps, 1), condition.keys,
                                    condition.values, condition.tables)
            time_all = net.time_condition(every_t, tiled)

            def grouped(tensor, row_dim):
                return tensor.unflatten(row_dim, (steps, -1)).movedim(row_dim, 0).contiguous()

            groups = (grouped(time_all.modulations, 3), grouped(time_all.keys, 1), grouped(time_all.values, 1))
            s = step_graph
            if not s:
                s["condition"] = type(condition)(*(t.clone() for t in (condition.frame_term, condition.hidden,
                                                                        condition.keys, condition.values)),
                                                  condition.tables)
                s["groups"] = tuple(g.clone() for g in groups)
                s["x"], s["x_start"] = x_T.clone(), torch.empty_like(x_T)
                s["noise"] = torch.zeros(steps, b, 80, 265, device=device)
                s["consts"] = torch.tensor([sampler.alpha_next_sqrt + (0.0,), sampler.c + (0.0,),
                                            sampler.sigma + (0.0,)], device=device)
                s["idx"] = torch.zeros(1, dtype=torch.long, device=device)

                def body():
                    i = s["idx"]
                    mods, keys, values = (g.index_select(0, i).squeeze(0) for g in s["groups"])
                    t = sampler.timesteps.index_select(0, i).expand(b)
                    pred_noise, x_start = net.guided_step(s["x"], t, s["condition"],
                                                          LMDMTimeCondition(mods, keys, values))
                    a = s["consts"].index_select(1, i)
                    x_next = x_start * a[0] + a[1] * pred_noise + a[2] * s["noise"].index_select(0, i).squeeze(0)
                    s["x"].copy_(x_next)
                    s["x_start"].copy_(x_start)
                    s["idx"].add_(1)

                if not cuda:  # a check of the step's arithmetic on a CPU: every step eager
                    s["graph"] = type("Eager", (), {"replay": staticmethod(body)})
                    return step_sample(aud)
                side = torch.cuda.Stream(device)  # warm-up off the capture stream, as CapturedCall does
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    body()
                torch.cuda.current_stream(device).wait_stream(side)
                s["graph"] = torch.cuda.CUDAGraph()
                with torch.cuda.graph(s["graph"], stream=torch.cuda.Stream(device), capture_error_mode="thread_local"):
                    body()
            for static, value in zip((s["condition"].frame_term, s["condition"].hidden, s["condition"].keys,
                                      s["condition"].values) + s["groups"],
                                     (condition.frame_term, condition.hidden, condition.keys, condition.values)
                                     + groups):
                static.copy_(value)
            s["x"].copy_(x_T)
            s["noise"][: steps - 1].copy_(noise)
            s["idx"].zero_()
            for _ in range(steps):
                s["graph"].replay()
            return s["x_start"].clone()

    times, windows = [], []
    for aud in conds:
        begin = time.perf_counter()
        if variant == "step":
            window = step_sample(aud)
        else:
            window = sampler.sample(kp, aud, x_T, noise)
        sync()
        times.append(time.perf_counter() - begin)
        windows.append(window.float().cpu())
    torch.save(torch.stack(windows), out.with_suffix(".pt"))
    out.write_text(json.dumps({
        "variant": variant, "device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
        "import_torch_s": imported - start, "load_s": loaded - loaded_at, "windows_s": times,
        "first_window_s": times[0], "later_window_median_s": sorted(times[2:])[len(times[2:]) // 2],
    }))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--child-out", type=Path)
    parser.add_argument("--device", default="cuda", help="cpu: a check of the step variant's arithmetic only")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.models, args.child_out, args.device)
        return
    import torch

    runs = {v: [] for v in VARIANTS}
    agreement = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for variant in VARIANTS:
                out = Path(tmp) / f"{variant}_{round_}.json"
                begin = time.perf_counter()
                subprocess.run([sys.executable, __file__, "--models", str(args.models), "--child", variant,
                                "--child-out", str(out), "--device", args.device], check=True, env=os.environ.copy())
                run = json.loads(out.read_text())
                run["child_wall_s"] = time.perf_counter() - begin
                runs[variant].append(run)
                print(variant, round_, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in run.items()
                                        if k != "windows_s"}, [round(t, 4) for t in run["windows_s"]], flush=True)
        reference = torch.load(Path(tmp) / "window_0.pt", weights_only=True)
        for variant in VARIANTS:
            other = torch.load(Path(tmp) / f"{variant}_0.pt", weights_only=True)
            agreement[variant] = {"rel_l2": float((other - reference).norm() / reference.norm()),
                                  "max_abs": float((other - reference).abs().max())}
    print("against window:", agreement)
    summary = {v: {"first_window_s": [round(r["first_window_s"], 4) for r in rs],
                   "later_window_median_s": [round(r["later_window_median_s"], 5) for r in rs]}
               for v, rs in runs.items()}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"runs": runs, "agreement": agreement, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
