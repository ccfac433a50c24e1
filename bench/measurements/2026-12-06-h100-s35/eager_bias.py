"""Session 35 probe: an eager fp16 warp+decode batch of 32 (every Triton kernel of ours on, as a new
process's first clip renders) with the decoder's kernel path as session 34 left it ("before":
every conv adds its own bias, PyTorch's pass over its output) and as now ("after": the scale/shift
convs' biases added by the modulation kernel, conv_0's left out, the shortcut's joined to conv_1's),
alternating in one process: ms a frame (CUDA events) and rel-L2 against the fp32 eager batch.
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from bench.scene import render_networks  # noqa: E402
from ditto_core.models import decoder as decoder_module  # noqa: E402
from ditto_core.models.spade_norm_triton import instance_stats, spade_modulate  # noqa: E402
from ditto_core.models.triton_kernels import use_triton_kernels_  # noqa: E402
from ditto_core.render.aot_package import warp_decode_step  # noqa: E402

BATCH, REPS = 32, 5
EPS, SLOPE = decoder_module._INSTANCE_NORM_EPS, decoder_module._NEGATIVE_SLOPE


def before(self, x, label):
    """Session 34's SPADEResnetBlock._forward_kernels (each conv with its bias)."""
    hidden = self._embed(label)
    stats = instance_stats(x, EPS)
    scale, shift = self.norm_0.scale_shift(hidden[0])
    dx = self.conv_0(spade_modulate(x, stats, scale, shift, self.upsample, SLOPE))
    scale, shift = self.norm_1.scale_shift(hidden[1])
    dx = self.conv_1(spade_modulate(dx, instance_stats(dx, EPS), scale, shift, 1, SLOPE))
    if self.shortcut is None:
        return dx.add_(decoder_module._upsample(x, self.upsample))
    scale, shift = self.shortcut.scale_and_conv_shift(hidden[2])
    return dx.add_(self.shortcut.conv(spade_modulate(x, stats, scale, None, self.upsample, None)).add_(shift))


variants = {"before": before, "after": decoder_module.SPADEResnetBlock._forward_kernels}
dev = torch.device("cuda")
g = torch.Generator().manual_seed(1)
f_s = torch.randn(1, 32, 16, 64, 64, generator=g).to(dev)
kp_s = (torch.randn(BATCH, 21, 3, generator=g) * 0.1).to(dev)
kp_d = kp_s + 0.01 * torch.randn(BATCH, 21, 3, generator=g).to(dev)
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
with torch.inference_mode():
    reference = warp_decode_step(*render_networks(dev, torch.float32), f_s, kp_s, kp_d).float()
    torch.cuda.empty_cache()
    warp, decoder = render_networks(dev, torch.float16)
    use_triton_kernels_(warp, True)
    print("decoder blocks with kernels", use_triton_kernels_(decoder, True), flush=True)
    half = f_s.half()
    results = {name: [] for name in variants}
    for round_ in range(3):
        for name, forward in variants.items():
            decoder_module.SPADEResnetBlock._forward_kernels = forward
            out = warp_decode_step(warp, decoder, half, kp_s, kp_d).float()
            torch.cuda.synchronize()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(REPS):
                warp_decode_step(warp, decoder, half, kp_s, kp_d)
            stop.record()
            torch.cuda.synchronize()
            results[name].append(round(start.elapsed_time(stop) / REPS / BATCH, 4))
            rel = float((out - reference).norm() / reference.norm())
            print(name, "round", round_, "ms/frame", results[name][-1], "rel-L2 vs fp32", f"{rel:.3e}", flush=True)
print({name: min(times) for name, times in results.items()})
