"""What a new process's first call of each HuBERT / LMDM operation costs, one process per run.

    python3 first_use_probe.py {default|no_cudnn_sdp}

After the CUDA context and cuBLAS are up (a matmul), times the first and second call of: the
HuBERT-large attention (fp16, 79 chunks x 16 heads x 20 frames x 64), the LMDM attention (fp32 and
bf16, 2 x 8 heads x 80 x 64), HuBERT's first feature conv and its positional grouped conv (fp16).
Prints one JSON line.
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

mode = sys.argv[1]
if mode == "no_cudnn_sdp":
    torch.backends.cuda.enable_cudnn_sdp(False)
dev = torch.device("cuda")
torch.ones(1, device=dev)
a = torch.randn(256, 256, device=dev)
(a @ a).sum().item()


def timed(fn):
    out = []
    for _ in range(2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(round((time.perf_counter() - t) * 1e3, 2))
    return out


h = torch.randn(79, 16, 20, 64, device=dev, dtype=torch.float16)
l32 = torch.randn(2, 8, 80, 64, device=dev)
l16 = l32.bfloat16()
wav = torch.randn(79, 1, 6480, device=dev, dtype=torch.float16)
w0 = torch.randn(512, 1, 10, device=dev, dtype=torch.float16)
x = torch.randn(79, 1024, 20, device=dev, dtype=torch.float16)
wp = torch.randn(1024, 64, 128, device=dev, dtype=torch.float16)
ms = {
    "hubert_sdpa_fp16": timed(lambda: F.scaled_dot_product_attention(h, h, h)),
    "lmdm_sdpa_fp32": timed(lambda: F.scaled_dot_product_attention(l32, l32, l32)),
    "lmdm_sdpa_bf16": timed(lambda: F.scaled_dot_product_attention(l16, l16, l16)),
    "hubert_conv0_fp16": timed(lambda: F.conv1d(wav, w0, stride=5)),
    "hubert_posconv_fp16": timed(lambda: F.conv1d(x, wp, padding=64, groups=16)),
}
prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
with prof:
    F.scaled_dot_product_attention(h, h, h)
    torch.cuda.synchronize()
kernels = sorted({e.name[:60] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
print(json.dumps({"mode": mode, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                  "ms_first_second": ms, "hubert_sdpa_kernels": kernels}))
