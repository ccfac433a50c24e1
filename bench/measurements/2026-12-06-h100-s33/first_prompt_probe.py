"""Session 33: where a new process's first clip loses its time, stage by stage, in the order a
ComfyUI first prompt runs it (ComfyUI's allocator: set PYTORCH_CUDA_ALLOC_CONF in the shell; the
engine "deferred", as nodes/model_registry.py builds it). One process per run; the variant:

  main        as the nodes do: start_warmup() (the eager warp+decode primed on a thread), then the job
  nocudnnsdp  the same with cuDNN's attention backend off (is its first-use plan building the cost?)
  lmdmfirst   the LMDM sampler's window graph recorded on zeros before start_warmup()
  noprime     start_warmup(prime="off")
  prewarmed   first a throw-away pipeline (eager engine) renders 1 s of the speech and is dropped: what a
              process whose CUDA libraries, kernels and encoder were warmed before the prompt (say at
              ComfyUI's start, on zeros) would pay; then as main with new models (the "prewarm_s" apart)
  prewarmedzeros  the same warming done on zeros only, as a feature would: the throw-away pipeline's
              priming, one LMDM window and HuBERT over 15 s of silence; no registration, paste-back
              or encoder

Timeline (seconds since the models were loaded): each LMDM window (start, end after a sync,
eager or graph), the priming's start and end, the stage times; then the same job again in the
same process (warm, still eager: the deferred compile is not waited for).

    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 first_prompt_probe.py VARIANT MODELS IMAGE AUDIO OUT.json [JOBS]

(MODELS/aux_models/hubert_streaming_fix_kv.onnx: the HuBERT-large, as bench_time_to_video links it.)
"""
import json
import os
import sys
import time

T0 = time.perf_counter()
import torch  # noqa: E402
from pathlib import Path  # noqa: E402

IMPORT_TORCH = time.perf_counter() - T0


def main() -> None:
    variant, models, image, audio, out = sys.argv[1:6]
    count = int(sys.argv[6]) if len(sys.argv) > 6 else 2  # jobs in the process (call 4: 1)
    from ditto_core.motion.lmdm_sampler import DDIMSampler
    from ditto_core.motion.motion_options import MotionOptions
    from ditto_core.pipeline import DittoPipeline
    from ditto_core.precision import lmdm_precision_for
    from ditto_core.registration.options import RegistrationOptions
    from ditto_core.render.warp_decode import WarpDecodeEngine

    events = []
    base = [0.0]

    def now() -> float:
        return round(time.perf_counter() - base[0], 4)

    original_sample = DDIMSampler.sample

    def timed_sample(self, kp, aud, x, noise):
        graph = (tuple(aud.shape), x.device) in self._graphs
        start = now()
        result = original_sample(self, kp, aud, x, noise)
        sync()
        events.append(("lmdm_window", start, now(), "graph" if graph else
                       ("recorded" if (tuple(aud.shape), x.device) in self._graphs else "eager")))
        return result

    DDIMSampler.sample = timed_sample
    original_prime = WarpDecodeEngine._prime_eager

    def timed_prime(self, full_batch):
        start = now()
        original_prime(self, full_batch)
        sync()
        events.append(("priming", start, now(), full_batch))

    WarpDecodeEngine._prime_eager = timed_prime
    if variant == "nocudnnsdp":
        torch.backends.cuda.enable_cudnn_sdp(False)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cpu: a dry run of the script
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    result = {}
    if variant.startswith("prewarmed"):
        start = time.perf_counter()
        throwaway = DittoPipeline.from_model_dir(models, device, torch.float16 if device.type == "cuda" else torch.float32,
                                                 detect_face=False, compile=False)
        if variant == "prewarmed":
            throwaway.run(image, audio, Path(out).parent / "prewarm.mp4", RegistrationOptions(detect_face=False),
                          MotionOptions(steps=25), preset="ultrafast", max_seconds=1.0)
        else:
            throwaway.start_warmup(prime="full")
            options = MotionOptions(steps=25)
            sampler = throwaway.sampler(options.steps, lmdm_precision_for(options.sampler_precision, throwaway.models.dtype),
                                        options.sampler_compile)
            zeros = torch.zeros
            sampler.sample(zeros(1, 265, device=device), zeros(1, 80, throwaway.models.cond_dim, device=device),
                           zeros(1, 80, 265, device=device), zeros(*sampler.noise_shape(1), device=device))
            throwaway.audio_features(torch.zeros(1, 16000 * 15), 16000)
            throwaway.engine()._primed()
            sync()
        del throwaway
        import gc
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        result["prewarm_s"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    pipeline = DittoPipeline.from_model_dir(models, device, torch.float16 if device.type == "cuda" else torch.float32, cache_dir=Path(out).parent / "avatars",
                                            detect_face=False, warmup="deferred")
    sync()
    result |= {"variant": variant, "allocator": torch.cuda.memory.get_allocator_backend() if device.type == "cuda" else None,
              "import_torch_s": round(IMPORT_TORCH, 3), "load_models_s": round(time.perf_counter() - start, 3),
              "hubert_backend": getattr(pipeline.hubert, "backend", "?")}
    base[0] = time.perf_counter()
    options = MotionOptions(steps=25)
    if variant == "lmdmfirst":
        sampler = pipeline.sampler(options.steps, lmdm_precision_for(options.sampler_precision, pipeline.models.dtype),
                                   options.sampler_compile)
        zeros = torch.zeros
        sampler.sample(zeros(1, 265, device=device), zeros(1, 80, pipeline.models.cond_dim, device=device),
                       zeros(1, 80, 265, device=device), zeros(*sampler.noise_shape(1), device=device))
        events.append(("lmdm_recorded_before_warmup", 0.0, now(), None))
    pipeline.start_warmup(prime="off" if variant == "noprime" else "full")
    events.append(("start_warmup_returned", now(), now(), None))
    jobs = []
    for index in range(count):
        began = now()
        pipeline.times.seconds.clear()
        pipeline.run(image, audio, Path(out).parent / f"{variant}_{index}.mp4", RegistrationOptions(detect_face=False),
                     options, preset="ultrafast")
        jobs.append({"start": began, "end": now(), "stages": {k: round(v, 4) for k, v in pipeline.times.seconds.items()}})
        events.append((f"job{index}", began, now(), None))
    result["jobs"] = jobs
    result["events"] = events
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(variant, "prewarm", result.get("prewarm_s"), "load", result["load_models_s"], "job0", round(jobs[0]["end"] - jobs[0]["start"], 3), jobs[0]["stages"],
          "job1", round(jobs[1]["end"] - jobs[1]["start"], 3) if count > 1 else None)
    print("  ", [e for e in events if e[0] != "lmdm_window" or True][:40])
    os._exit(0)  # as the CLI ends: the deferred compile's thread is not waited for


if __name__ == "__main__":
    main()
