"""Session 32: is torch.compile's saved function of the warp+decode step worth loading in a new
process? Session 31's saved-step branch was lost before it ran; this measures what it relies on,
on the device's torch, before it is written again.

Each mode is one new process (ComfyUI's allocator where the shell sets PYTORCH_CUDA_ALLOC_CONF),
random networks of the official layout, fp16, batch 32, one shared source volume, our Triton
kernels on, the step as a free function of (warp network, decoder, inputs) so that what is saved
serves any instance:

    build MODELS FILE: aot_compile (Dynamo's enable_aot_compile patched on), one call, save to FILE
    load MODELS FILE: load FILE (under inference mode), its first and second calls, rel-L2 to eager
    eager MODELS: the first and second eager calls of a batch of 32 (what a new process pays now)

Prints one JSON line per process.
"""
import json
import os
import sys
import time

T0 = time.perf_counter()
import torch  # noqa: E402

from ditto_core.models.checkpoints import load_network  # noqa: E402
from ditto_core.models.triton_kernels import register_triton_operators, use_triton_kernels_  # noqa: E402
from ditto_core.render.aot_package import warp_decode_step  # noqa: E402


BATCH = int(os.environ.get("BATCH", "32"))


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(call):
    start = time.perf_counter()
    out = call()
    synchronize()
    return out, time.perf_counter() - start


def main() -> None:
    mode, models = sys.argv[1], sys.argv[2]
    record = {"mode": mode, "torch": torch.__version__, "import_s": time.perf_counter() - T0}
    cuda = torch.cuda.is_available()  # the CPU only to try the script out (fp32, BATCH frames)
    device, dtype, batch = torch.device("cuda" if cuda else "cpu"), torch.float16 if cuda else torch.float32, BATCH
    start = time.perf_counter()
    warp = load_network("warp_network", models, device, dtype).eval()
    decoder = load_network("decoder", models, device, dtype).eval()
    record["triton_layers"] = use_triton_kernels_(warp, device.type == "cuda")
    synchronize()
    record["models_s"] = time.perf_counter() - start
    with torch.inference_mode():
        generator = torch.Generator(device).manual_seed(0)
        f_s = torch.randn(1, 32, 16, 64, 64, device=device, generator=generator).to(dtype)
        kp_s = torch.randn(batch, 21, 3, device=device, generator=generator) * 0.1
        kp_d = torch.randn(batch, 21, 3, device=device, generator=generator) * 0.1
        args = (warp, decoder, f_s, kp_s, kp_d)
        if mode == "build":
            import torch._dynamo.config as dynamo_config

            register_triton_operators()
            compiled = torch.compile(warp_decode_step, fullgraph=True, dynamic=False)
            patch = {"enable_aot_compile": True} if hasattr(dynamo_config, "enable_aot_compile") else {}
            start = time.perf_counter()
            with dynamo_config.patch(**patch):
                step = compiled.aot_compile((args, {}))
            record["aot_compile_s"] = time.perf_counter() - start
            _, record["first_call_s"] = timed(lambda: step(*args))
            start = time.perf_counter()
            step.save_compiled_function(sys.argv[3])
            record["save_s"] = time.perf_counter() - start
        elif mode == "load":
            start = time.perf_counter()
            register_triton_operators()
            record["register_s"] = time.perf_counter() - start
            start = time.perf_counter()
            with open(sys.argv[3], "rb") as file:
                step = torch.compiler.load_compiled_function(file)
            record["load_s"] = time.perf_counter() - start
            out, record["first_call_s"] = timed(lambda: step(*args))
            _, record["second_call_s"] = timed(lambda: step(*args))
            _, record["third_call_s"] = timed(lambda: step(*args))
            reference = warp_decode_step(*args).float()
            record["rel_l2"] = ((out.float() - reference).norm() / reference.norm()).item()
        else:
            _, record["first_call_s"] = timed(lambda: warp_decode_step(*args))
            _, record["second_call_s"] = timed(lambda: warp_decode_step(*args))
            _, record["third_call_s"] = timed(lambda: warp_decode_step(*args))
    record["process_s"] = time.perf_counter() - T0
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
