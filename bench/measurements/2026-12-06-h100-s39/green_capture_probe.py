"""Session 39: do CUDA graphs keep to a green context's SMs, and if so, recorded where?

``green_contention_probe.py`` found the real render's graphs as fast on a 116-SM green stream as
on the whole device (and the LMDM window beside them as slow as on ordinary streams), where
``green_context_probe.py``'s eager convolutions on such a stream slowed by the SMs taken away:
a graph recorded on an ordinary stream seems to run on the whole device wherever it is launched.
Here both loads are CUDA graphs (a chain of 2,000 small GEMMs; 8 3x3 convs over 20 128x128x128
images), recorded (a) on ordinary streams, (b) on the green streams with their green context
current on the recording thread; each replayed on the green streams: the chain alone, the convs'
rate alone, the chain beside a thread replaying the convs. The chain also runs a Triton kernel
every 100 GEMMs, and every kernel has run in the primary context before (b) records it: whether
cuBLAS handles and Triton's loaded modules serve inside a green context. Prints one JSON line.
"""
import ctypes
import json
import statistics
import threading
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

RES = 1024


@triton.jit
def _halve(x_ptr, n, BLOCK: tl.constexpr):
    """A Triton kernel in the chain (Inductor's and ours launch through Triton's own loader)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 0.5, mask=mask)


class Green:
    """Two green contexts over disjoint SMs (``sms`` and the rest), a stream and a CUcontext each."""

    def __init__(self, sms: int):
        cu = self.cu = ctypes.CDLL("libcuda.so.1")
        dev = ctypes.c_int()
        self.ok(cu.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()))
        whole, group, rest = (ctypes.create_string_buffer(RES) for _ in range(3))
        self.ok(cu.cuDeviceGetDevResource(dev, whole, 1))
        n = ctypes.c_uint(1)
        self.ok(cu.cuDevSmResourceSplitByCount(group, ctypes.byref(n), whole, rest, 0, sms))
        self.parts = []
        for res in (group, rest):
            desc, g, ctx, stream = (ctypes.c_void_p() for _ in range(4))
            self.ok(cu.cuDevResourceGenerateDesc(ctypes.byref(desc), res, 1))
            self.ok(cu.cuGreenCtxCreate(ctypes.byref(g), desc, dev, 1))
            self.ok(cu.cuCtxFromGreenCtx(ctypes.byref(ctx), g))
            self.ok(cu.cuGreenCtxStreamCreate(ctypes.byref(stream), g, 1, 0))
            self.parts.append((ctx, torch.cuda.ExternalStream(stream.value)))

    def ok(self, status):
        if status:
            name = ctypes.c_char_p()
            self.cu.cuGetErrorName(status, ctypes.byref(name))
            raise RuntimeError(name.value.decode())

    def record(self, which: int, fn):
        """``fn`` recorded as a graph on part ``which``'s stream, its context current meanwhile."""
        ctx, stream = self.parts[which]
        # The _v2 entry points (cuda.h maps the names to them): call 4 ran the unversioned,
        # CUDA 3-era symbols, which want a floating context and answered CUDA_ERROR_INVALID_CONTEXT.
        self.ok(self.cu.cuCtxPushCurrent_v2(ctx))
        try:
            return record(fn, stream)
        finally:
            popped = ctypes.c_void_p()
            self.ok(self.cu.cuCtxPopCurrent_v2(ctypes.byref(popped)))


def record(fn, stream):
    with torch.cuda.stream(stream):
        fn()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    return graph


def measure(chain_graph, conv_graph, chain_stream, conv_stream):
    def replay(graph, stream):
        with torch.cuda.stream(stream):
            graph.replay()
        stream.synchronize()

    def timed(graph, stream, n=5):
        times = []
        for _ in range(n):
            t = time.perf_counter(); replay(graph, stream); times.append(time.perf_counter() - t)
        return 1000 * statistics.median(times[1:])

    out = {"chain_alone_ms": timed(chain_graph, chain_stream), "conv_alone_ms": timed(conv_graph, conv_stream)}
    stop, count = threading.Event(), [0]

    def load():
        while not stop.is_set():
            replay(conv_graph, conv_stream); count[0] += 1

    thread = threading.Thread(target=load, daemon=True); thread.start(); time.sleep(0.2)
    c0, t0 = count[0], time.perf_counter()
    out["chain_beside_ms"] = timed(chain_graph, chain_stream, 8)
    out["conv_per_s_beside"] = (count[0] - c0) / (time.perf_counter() - t0)
    stop.set(); thread.join()
    return {k: round(v, 2) for k, v in out.items()}


def main():
    dev = torch.device("cuda")
    w = torch.randn(512, 512, device=dev, dtype=torch.half) / 32
    y0 = torch.randn(16, 512, device=dev, dtype=torch.half)
    x = torch.randn(20, 128, 128, 128, device=dev, dtype=torch.half).to(memory_format=torch.channels_last)
    k = torch.randn(128, 128, 3, 3, device=dev, dtype=torch.half).to(memory_format=torch.channels_last) / 40

    def chain():
        y = y0
        for i in range(2000):
            y = torch.addmm(y0, y, w)
            if i % 100 == 99:
                _halve[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)

    def convs():
        y = x
        for _ in range(8):
            y = F.conv2d(y, k, padding=1)

    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    plain = (torch.cuda.Stream(priority=-1), torch.cuda.Stream())
    graphs = (record(chain, plain[0]), record(convs, plain[1]))
    result["ordinary"] = measure(*graphs, *plain)
    print(json.dumps(result), flush=True)
    for sms in (16,):
        try:
            g = Green(sms)
            motion, rest = g.parts[0][1], g.parts[1][1]
            result[f"green_{sms}_recorded_ordinary"] = measure(*graphs, motion, rest)
            green_graphs = (g.record(0, chain), g.record(1, convs))
            result[f"green_{sms}_recorded_green"] = measure(*green_graphs, motion, rest)
        except Exception as e:
            result[f"green_{sms}"] = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
