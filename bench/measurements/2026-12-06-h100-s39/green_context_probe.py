"""Session 39: can a chain of small kernels (the LMDM window: 4,680 of them at 25 steps) keep its
speed beside a render's long convolutions if the two run on disjoint SMs (CUDA green contexts)?

Session 38's contention probe: a 4-stream LMDM window 16 ms alone, 263 ms beside the render,
whatever the stream priority. Here a stand-in: a chain of small GEMMs (one kernel each, each
needing the one before) timed alone and beside a thread that keeps 3x3 conv batches queued;
(a) both on ordinary streams (the chain's at high priority, as the live motion thread's), (b) the
chain on a stream of a green context of a few SMs and the convs on one of the remaining SMs
(eager and replayed from one CUDA graph; driver API through ctypes: cuDevSmResourceSplitByCount, cuGreenCtxCreate, cuGreenCtxStreamCreate;
the streams handed to PyTorch as external streams). Prints one JSON line.
"""
import ctypes
import json
import statistics
import sys
import threading
import time

import torch
import torch.nn.functional as F

CHAIN = 2000
RES_BYTES = 1024  # CUdevResource is 144 bytes in CUDA 12.x headers; room for a later layout


def check(cu, status, what):
    if status != 0:
        name = ctypes.c_char_p()
        cu.cuGetErrorName(status, ctypes.byref(name))
        raise RuntimeError(f"{what}: {name.value.decode() if name.value else status}")


def green_streams(motion_sms: int):
    cu = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    check(cu, cu.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()), "cuDeviceGet")
    whole = ctypes.create_string_buffer(RES_BYTES)
    check(cu, cu.cuDeviceGetDevResource(dev, whole, 1), "cuDeviceGetDevResource")  # 1: CU_DEV_RESOURCE_TYPE_SM
    group, rest = ctypes.create_string_buffer(RES_BYTES), ctypes.create_string_buffer(RES_BYTES)
    n = ctypes.c_uint(1)
    check(cu, cu.cuDevSmResourceSplitByCount(group, ctypes.byref(n), whole, rest, 0, motion_sms), "split")
    counts = [int.from_bytes(b.raw[96:100], "little") for b in (whole, group, rest)]
    streams = []
    for res in (group, rest):
        desc, ctx, stream = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        check(cu, cu.cuDevResourceGenerateDesc(ctypes.byref(desc), res, 1), "desc")
        check(cu, cu.cuGreenCtxCreate(ctypes.byref(ctx), desc, dev, 1), "cuGreenCtxCreate")  # 1: DEFAULT_STREAM
        check(cu, cu.cuGreenCtxStreamCreate(ctypes.byref(stream), ctx, 1, 0), "cuGreenCtxStreamCreate")  # non-blocking
        streams.append(torch.cuda.ExternalStream(stream.value))
    return streams, counts


def chain(w, y0):
    y = y0
    for _ in range(CHAIN):
        y = torch.addmm(y0, y, w)
    return y


def recorded_chain(w, y0):
    """The chain as one CUDA graph, recorded on an ordinary stream (the live LMDM window is replayed)."""
    chain(w, y0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain(w, y0)
    return graph


def chain_ms(stream, w, y0, graph=None):
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.cuda.stream(stream):
            graph.replay() if graph is not None else chain(w, y0)
            stream.synchronize()
        times.append(1000 * (time.perf_counter() - t))
    return statistics.median(times[1:])


class ConvLoad:
    """Keeps conv batches queued on ``stream`` until stopped; counts batches done."""

    def __init__(self, stream, x, k):
        self.stream, self.x, self.k, self.done, self.stop = stream, x, k, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        with torch.cuda.stream(self.stream):
            while not self.stop.is_set():
                y = self.x
                for _ in range(8):
                    y = F.conv2d(y, self.k, padding=1)
                self.stream.synchronize()
                self.done += 1

    def rate(self, seconds):
        start, t = self.done, time.perf_counter()
        time.sleep(seconds)
        return (self.done - start) / (time.perf_counter() - t)


def measure(chain_stream, load_stream, w, y0, x, k, graph):
    out = {"chain_alone_ms": chain_ms(chain_stream, w, y0), "graph_alone_ms": chain_ms(chain_stream, w, y0, graph)}
    load = ConvLoad(load_stream, x, k)
    load.thread.start()
    out["conv_batches_per_s_alone"] = load.rate(1.5)
    out["chain_beside_ms"] = chain_ms(chain_stream, w, y0)
    out["graph_beside_ms"] = chain_ms(chain_stream, w, y0, graph)
    out["conv_batches_per_s_beside"] = load.rate(1.0)
    load.stop.set(); load.thread.join()
    return {k: round(v, 2) for k, v in out.items()}


def main():
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    w = torch.randn(512, 512, device=dev, dtype=torch.half) / 32
    y0 = torch.randn(16, 512, device=dev, dtype=torch.half)
    x = torch.randn(20, 128, 128, 128, device=dev, dtype=torch.half).to(memory_format=torch.channels_last)
    k = torch.randn(128, 128, 3, 3, device=dev, dtype=torch.half).to(memory_format=torch.channels_last) / 40
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "sms": torch.cuda.get_device_properties(dev).multi_processor_count,
              "torch_green_context_api": hasattr(torch._C, "_CUDAGreenContext") or hasattr(torch._C, "GreenContext")}
    graph = recorded_chain(w, y0)
    lo, hi = torch.cuda.Stream.priority_range()
    result["streams"] = measure(torch.cuda.Stream(priority=hi), torch.cuda.Stream(), w, y0, x, k, graph)
    for sms in (8, 16):
        try:
            (g, rest), counts = green_streams(sms)
            result[f"green_{sms}"] = {"sm_counts_whole_group_rest": counts, **measure(g, rest, w, y0, x, k, graph)}
        except Exception as e:  # the answer is then "no", and why
            result[f"green_{sms}"] = f"{type(e).__name__}: {e}"
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
