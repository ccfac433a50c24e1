"""Session 39: does a CUDA graph recorded under PyTorch's own green-context API keep to its SMs?

``green_capture_probe.py`` found graphs recorded on ordinary streams running on the whole device
wherever replayed, and its own recording under a pushed green context failed. Here the chain of
2,000 small GEMMs is recorded as a graph after ``torch.cuda.green_contexts.GreenContext.create(16)``
and ``make_current()`` (PyTorch's path: the green context's default stream), then replayed from an
ordinary thread on an ordinary stream, alone and beside eager convs (as in
``green_context_probe.py``) on a stream of the other 116 SMs (the ctypes split of that probe) and
beside eager convs on an ordinary stream (the whole device). Prints one JSON line.
"""
import importlib.util
import json
import statistics
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("green_context_probe", HERE / "green_context_probe.py")
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


def main():
    dev = torch.device("cuda")
    w = torch.randn(512, 512, device=dev, dtype=torch.half) / 32
    y0 = torch.randn(16, 512, device=dev, dtype=torch.half)
    x = torch.randn(20, 128, 128, 128, device=dev, dtype=torch.half).to(memory_format=torch.channels_last)
    k = torch.randn(128, 128, 3, 3, device=dev, dtype=torch.half).to(memory_format=torch.channels_last) / 40
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    (_, rest), counts = probe.green_streams(16)
    result["split"] = counts
    try:
        from torch.cuda.green_contexts import GreenContext
        ctx = GreenContext.create(num_sms=16, device_id=0)
        # The method names changed between releases (make_current / set_context).
        enter = getattr(ctx, "set_context", None) or ctx.make_current
        leave = getattr(ctx, "pop_context", None) or ctx.pop_current
        enter()
        # Recorded on the green context's own stream where the release offers one (torch's
        # pool streams belong to the context current when the pool was made: the primary one).
        green_stream = ctx.Stream() if hasattr(ctx, "Stream") else torch.cuda.current_stream()
        try:
            with torch.cuda.stream(green_stream):
                probe.chain(w, y0)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=green_stream):
                probe.chain(w, y0)
        finally:
            leave()
    except Exception as e:
        result["record"] = f"{type(e).__name__}: {e}"[:400]
        print(json.dumps(result)); return
    ordinary = torch.cuda.Stream(priority=-1)

    def chain_ms(n=6):
        times = []
        for _ in range(n):
            t = time.perf_counter()
            with torch.cuda.stream(ordinary):
                graph.replay()
            ordinary.synchronize()
            times.append(time.perf_counter() - t)
        return round(1000 * statistics.median(times[1:]), 2)

    result["chain_alone_ms"] = chain_ms()
    for name, stream in (("rest_116", rest), ("ordinary", torch.cuda.Stream())):
        load = probe.ConvLoad(stream, x, k)
        load.thread.start()
        time.sleep(0.3)
        result[f"chain_beside_convs_on_{name}_ms"] = chain_ms(8)
        result[f"convs_per_s_on_{name}"] = round(load.rate(0.5), 1)
        load.stop.set(); load.thread.join()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
