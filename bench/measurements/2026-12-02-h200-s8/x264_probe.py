"""Diagnostic (not committed): where does a 1080x1920 yuv420p frame's time go between numpy and x264?"""
import json, os, sys, threading, time
import av, numpy as np

H, W, N = 1920, 1080, int(os.environ.get("PROBE_FRAMES", "300"))
rng = np.random.default_rng(0)
base = rng.integers(0, 255, (H * 3 // 2, W + 64), dtype=np.uint8)
frames = [np.ascontiguousarray(base[:, i % 64 : i % 64 + W]) for i in range(64)]
out = {}

def t_make(kind, n=200):
    reuse = av.VideoFrame(W, H, "yuv420p")
    t = time.perf_counter()
    for i in range(n):
        a = frames[i % 64]
        if kind == "from_ndarray":
            f = av.VideoFrame.from_ndarray(a, format="yuv420p")
        elif kind == "from_numpy_buffer":
            f = av.VideoFrame.from_numpy_buffer(a, format="yuv420p")
        elif kind == "reuse_copyto":
            for p, (lo, hi, w) in zip(reuse.planes, ((0, H, W), (H, H + H // 4, W), (H + H // 4, H * 3 // 2, W))):
                dst = np.frombuffer(p, np.uint8).reshape(-1, p.line_size)
                src = a[lo:hi].reshape(dst.shape[0], -1)
                np.copyto(dst[:, : src.shape[1]], src)
    return (time.perf_counter() - t) / n * 1e3

for kind in ("from_ndarray", "from_numpy_buffer", "reuse_copyto"):
    try:
        out[f"{kind}_ms"] = t_make(kind)
        # GIL check: the same in 4 threads at once
        ts = [threading.Thread(target=t_make, args=(kind, 100)) for _ in range(4)]
        t = time.perf_counter(); [x.start() for x in ts]; [x.join() for x in ts]
        out[f"{kind}_4threads_ms_per_frame"] = (time.perf_counter() - t) / 400 * 1e3
    except Exception as e:
        out[f"{kind}_error"] = repr(e)

def encode(preset, threads, n, zero_copy, path):
    c = av.open(path, "w", format="mp4")
    s = c.add_stream("libx264", rate=25); s.width, s.height, s.pix_fmt = W, H, "yuv420p"
    s.options = {"crf": "18", "preset": preset}
    s.codec_context.thread_type = "FRAME"; s.codec_context.thread_count = threads
    t = time.perf_counter()
    for i in range(n):
        a = frames[i % 64]
        f = av.VideoFrame.from_numpy_buffer(a, format="yuv420p") if zero_copy else av.VideoFrame.from_ndarray(a, format="yuv420p")
        f.pts = i
        c.mux(s.encode(f))
    c.mux(s.encode(None)); c.close()
    return n / (time.perf_counter() - t)

enc = {}
for preset in ("ultrafast", "superfast", "medium"):
    n = N if preset != "medium" else N // 3
    for threads in (0, 16, 32):
        for zc in (False, True):
            key = f"{preset}_1x{threads}_{'zerocopy' if zc else 'copy'}"
            try:
                enc[key] = encode(preset, threads, n, zc, f"/tmp/probe_{key}.mp4")
            except Exception as e:
                enc[key] = repr(e)
            print(key, enc[key], flush=True)
    for k, th in ((2, 8), (2, 12), (3, 6), (4, 4)):
        res = [0.0] * k
        def run(j):
            res[j] = encode(preset, th, n, True, f"/tmp/probe_{preset}_{k}_{j}.mp4")
        ts = [threading.Thread(target=run, args=(j,)) for j in range(k)]
        t = time.perf_counter(); [x.start() for x in ts]; [x.join() for x in ts]
        enc[f"{preset}_{k}x{th}_zerocopy_threads"] = k * n / (time.perf_counter() - t)
        print(f"{preset}_{k}x{th}", enc[f"{preset}_{k}x{th}_zerocopy_threads"], flush=True)
out["encode_fps"] = enc
print(json.dumps(out, indent=1))
if len(sys.argv) > 1:
    open(sys.argv[1], "w").write(json.dumps(out, indent=1))
