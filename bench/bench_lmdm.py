"""Time LMDM DDIM sampling per 80-frame window on CUDA, variants side by side.

* naive: what the reference does, built from the same module: two separate passes per step
  (conditional, then unconditional), each re-encoding the condition;
* eager: :class:`DDIMSampler` without graphs (condition encoded once per window, one 2B-row
  guided pass per step);
* graph_<precision>: the same loop recorded once into a CUDA graph and replayed, for each
  matrix-product precision (fp32 = TF32 off, tf32, bf16);
* compiled_<precision>: each step through ``torch.compile`` (fused kernels), then recorded;
* compiled_bf16_sdpa_<backend> (``--sdpa``): the live streams' sampler (compiled bf16) compiled
  and recorded with PyTorch's attention restricted to one backend (the default picks cuDNN's on
  Hopper, which clears a buffer before each of a window's 400 attention calls);
* compiled_bf16_autotune (``--autotune``): the same compiled with Inductor's ``max_autotune``
  (Triton matrix-product templates that can take the bias, GELU or residual after them into
  the same kernel; the window's kernel count is most of its time).

Every variant's window is compared with the fp32 eager window (``rel_l2_vs_fp32``): the error
each fast mode costs. Weights are random unless ``--model-dir`` points at the official files
(speed does not depend on the values; the error does, a little). Prints JSON; ``--out`` also
writes it to a file.

    python -m bench.bench_lmdm --steps 25 50 --batch 1 --out bench_lmdm.json
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Callable, ContextManager

import torch


from ditto_core.models.checkpoints import load_network
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import GUIDANCE_WEIGHT, LMDM, WINDOW
from ditto_core.motion.lmdm_sampler import DDIMSampler, generate_motion
from ditto_core.precision import LMDM_PRECISIONS

from .bench_common import cuda_event_times, emit, rel_l2, summary_ms

SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                 "math": "MATH"}


def attention_backend(name: str) -> ContextManager:
    """PyTorch's scaled-dot-product attention held to one backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[name]))


def naive_window(sampler: DDIMSampler, kp: torch.Tensor, aud: torch.Tensor, x: torch.Tensor, noise: torch.Tensor):
    """Reference-style sampling: per step, two full forward passes that each re-encode the condition."""
    lmdm, b = sampler.lmdm, x.shape[0]
    for i in range(sampler.steps):
        t = sampler.timesteps[i].expand(b)
        cond = lmdm(x, kp, aud, t)
        uncond = lmdm(x, kp, aud, t, null_cond=True)
        x_start = uncond + (cond - uncond) * GUIDANCE_WEIGHT
        if i == sampler.steps - 1:
            return x_start
        x = sampler.next_x(i, x_start, lmdm.noise_from_x0(x, t, x_start), noise[i])


def time_ms(fn: Callable[[], object], warmup: int, reps: int) -> dict[str, float]:
    return summary_ms(cuda_event_times(fn, reps, warmup))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", help="folder with lmdm_v0.4_hubert.pth (default: random weights)")
    parser.add_argument("--steps", type=int, nargs="+", default=[25, 50])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--naive-reps", type=int, default=5)
    parser.add_argument("--frames", type=int, default=394, help="sequence length for the end-to-end timing")
    parser.add_argument("--compile", nargs="*", default=list(LMDM_PRECISIONS), choices=LMDM_PRECISIONS,
                        help="precisions to also time with torch.compile'd steps (default: all)")
    parser.add_argument("--sdpa", nargs="*", default=[], choices=sorted(SDPA_BACKENDS),
                        help="attention backends to try for the compiled bf16 sampler, side by side")
    parser.add_argument("--autotune", action="store_true",
                        help="also the compiled bf16 sampler compiled with Inductor's max_autotune")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_lmdm needs a CUDA GPU")

    device = torch.device("cuda")
    # Each compiled variant compiles the guided step of its own network copy: a recompile of the
    # same code to Dynamo, which would fall back to eager past its limit (8) without a word.
    torch._dynamo.config.cache_size_limit = 64
    torch.manual_seed(0)
    if args.model_dir:
        lmdm = load_network("lmdm", args.model_dir, device=device)
    else:
        lmdm = LMDM().to(device).eval().requires_grad_(False)

    gen = torch.Generator(device=device).manual_seed(0)
    b = args.batch
    kp = torch.randn(b, MOTION_DIM, device=device, generator=gen)
    aud = torch.randn(b, WINDOW, lmdm.cond_dim, device=device, generator=gen)
    x_T = torch.randn(b, WINDOW, MOTION_DIM, device=device, generator=gen)

    report: dict = {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "batch": b,
        "weights": "official" if args.model_dir else "random",
        "per_window": {},
    }
    with torch.no_grad():
        for steps in args.steps:
            eager = DDIMSampler(lmdm, steps, cuda_graph=False)
            noise = torch.randn(eager.noise_shape(b), device=device, generator=gen)
            inputs = (kp, aud, x_T, noise)
            ref = eager.sample(*inputs)
            row = {
                "naive_two_pass": time_ms(lambda: naive_window(eager, *inputs), 1, args.naive_reps),
                "eager": time_ms(lambda: eager.sample(*inputs), 2, args.reps),
                "naive_vs_eager_max_abs": (naive_window(eager, *inputs) - ref).abs().max().item(),
            }
            variants = {f"graph_{p}": DDIMSampler(lmdm, steps, precision=p) for p in LMDM_PRECISIONS}
            # The prologue and one step recorded, the step replayed per step (the CLI's one clip).
            variants.update({f"step_graph_{p}": DDIMSampler(lmdm, steps, precision=p, graph_span="step")
                             for p in LMDM_PRECISIONS})
            variants.update(
                {f"compiled_{p}": DDIMSampler(lmdm, steps, precision=p, compile=True) for p in args.compile}
            )
            # What the compile and the recording of a variant see (and its replays, which see nothing).
            settings: dict[str, Callable[[], ContextManager]] = {name: contextlib.nullcontext for name in variants}
            for backend in args.sdpa:
                variants[f"compiled_bf16_sdpa_{backend}"] = DDIMSampler(lmdm, steps, precision="bf16", compile=True)
                settings[f"compiled_bf16_sdpa_{backend}"] = lambda backend=backend: attention_backend(backend)
            if args.autotune:
                from torch._inductor import config as inductor_config

                variants["compiled_bf16_autotune"] = DDIMSampler(lmdm, steps, precision="bf16", compile=True)
                settings["compiled_bf16_autotune"] = lambda: inductor_config.patch(max_autotune=True)
            for name, sampler in variants.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with settings[name]():
                    start.record()
                    sampler.sample(*inputs)  # warm-up run (and compilation) + capture
                    end.record()
                    end.synchronize()
                    row[name] = time_ms(lambda: sampler.sample(*inputs), 2, args.reps)
                    row[name]["first_call_ms"] = start.elapsed_time(end)
                    row[name]["rel_l2_vs_fp32"] = rel_l2(sampler.sample(*inputs), ref)
                row[name]["speedup_vs_naive"] = row["naive_two_pass"]["median_ms"] / row[name]["median_ms"]
            row["graph_fp32_vs_eager_max_abs"] = (variants["graph_fp32"].sample(*inputs) - ref).abs().max().item()
            report["per_window"][str(steps)] = row

            if b == 1:
                cond = torch.randn(args.frames, lmdm.cond_dim, device=device, generator=gen)
                for name in ("graph_fp32", *(f"compiled_{p}" for p in args.compile)):
                    timing = time_ms(lambda: generate_motion(variants[name], kp[0], cond, generator=gen), 1, 3)
                    row[f"sequence_{args.frames}_frames_{name}"] = timing

    emit(report, args.out)


if __name__ == "__main__":
    main()
