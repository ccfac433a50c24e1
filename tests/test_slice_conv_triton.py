"""The Triton kernel behind the warp network's mask conv (``ditto_core.models.slice_conv_triton``)
computes the convolution it replaces: in Triton's interpreter on the CPU (every tile config) and
on a GPU (autotuned, the real mask-conv shape; inside the compiled engine in
``test_triton_kernels.py``). The benchmark's candidate tiles are checked with the kernel's own."""
import copy
import inspect

import pytest
import torch

from ditto_core.models.depth_tap_conv import DepthTapConv3d
from tests.parity import rel_l2
from tests.recording_turns import recording_elsewhere, started_and_waiting
from tests.triton_interpreter import run_interpreted

INTERPRETED = """
    import json
    import torch
    import torch.nn.functional as F
    from bench.bench_mask_conv import CANDIDATE_TILES
    from ditto_core.models.depth_tap_conv import DepthTapConv3d
    from ditto_core.models.slice_conv_triton import CONFIGS, slice_conv_nhwc, tile_config

    def rel(a, b):
        return float((a.float() - b.float()).norm() / b.float().norm())

    g = torch.Generator().manual_seed(0)
    # Channel counts that leave partial K and N blocks, a non-square kernel, the image borders,
    # and the depth slices of an NDHWC volume read in place (strided, unit channel stride).
    volume = torch.randn(2, 44, 3, 9, 10, generator=g).half().contiguous(memory_format=torch.channels_last_3d)
    slices = volume.transpose(1, 2).flatten(0, 1)
    weight = (torch.randn(37, 44, 7, 5, generator=g) / 40).half()
    want = F.conv2d(slices.float(), weight.float(), padding=(3, 2))
    tiles, by_blocks = {}, {}
    # The benchmark's candidate tiles too: their timings must be of the same convolution.
    for tile in [*CONFIGS, *(tile_config(*shape) for shape in CANDIDATE_TILES)]:
        # The interpreter runs a program as whole-block numpy: warps and stages change nothing
        # there, so tiles with the same block sizes are one run (a few seconds each).
        blocks = json.dumps(tile.kwargs, sort_keys=True)
        if blocks not in by_blocks:
            got = slice_conv_nhwc(slices.permute(0, 2, 3, 1), weight, tile=tile).permute(0, 3, 1, 2)
            by_blocks[blocks] = [rel(got, want), str(got.dtype), list(got.shape)]
        tiles[str(tile)] = by_blocks[blocks]
    # More output channels than one program covers (several programs along N, as for the
    # depth taps of a 3x3x3 conv with 64 or 144 outputs).
    wide = (torch.randn(170, 44, 3, 3, generator=g) / 20).half()
    want_wide = F.conv2d(slices.float(), wide.float(), padding=1)
    wide_errors = [rel(slice_conv_nhwc(slices.permute(0, 2, 3, 1), wide, tile=CONFIGS[i]).permute(0, 3, 1, 2),
                       want_wide) for i in (0, -1)]
    conv = torch.nn.Conv3d(12, 5, (3, 5, 3), padding=(1, 2, 1)).half()
    x = torch.randn(1, 12, 4, 7, 6, generator=g).half()
    reference = F.conv3d(x.float(), conv.weight.float(), conv.bias.float(), padding=(1, 2, 1))
    taps = DepthTapConv3d(conv)
    taps.use_triton = True
    print(json.dumps({"tiles": tiles, "tile_count": len(CONFIGS) + len(CANDIDATE_TILES), "wide": wide_errors,
                      "depth_taps": rel(taps(x), reference)}))
"""


def test_kernel_computes_the_conv_for_every_tile_in_the_interpreter():
    result = run_interpreted(INTERPRETED)
    assert len(result["tiles"]) == result["tile_count"] >= 2  # every tile checked, none shadowed another
    for tile, (error, dtype, shape) in result["tiles"].items():
        # Inputs are exact in half precision; what is left is the float16 output's rounding.
        assert error < 1e-3, tile
        assert dtype == "torch.float16" and shape == [6, 37, 9, 10], tile
    assert max(result["wide"]) < 1e-3
    assert result["depth_taps"] < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@torch.inference_mode()
def test_mask_conv_by_triton_matches_fp32_as_closely_as_cudnn(dtype):
    torch.manual_seed(0)
    conv = torch.nn.Conv3d(144, 22, 7, padding=3).cuda()
    x = torch.randn(4, 144, 16, 64, 64, device="cuda").contiguous(memory_format=torch.channels_last_3d)
    with torch.backends.cudnn.flags(allow_tf32=False):
        want = conv(x)
    taps = DepthTapConv3d(copy.deepcopy(conv).to(dtype))
    cudnn = taps(x.to(dtype))
    taps.use_triton = True
    got = taps(x.to(dtype))
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert rel_l2(got, want) < 1.5 * rel_l2(cudnn, want) + 1e-4


def test_a_new_batch_size_compiles_no_tile_anew():
    """Triton compiles a kernel once per value of each of its constants: the slice count (16 a
    frame) must not be one, or every batch size (the eager first batch, full batches, the last
    one, the live ladder) compiles all six tiles again. It stays in the autotuning key."""
    triton = pytest.importorskip("triton")
    from ditto_core.models import slice_conv_triton

    kernel = slice_conv_triton._slice_conv_kernel
    constants = {kernel.arg_names[i] for i in kernel.constexprs}
    assert "SLICE_CLASS" in kernel.arg_names and "SLICE_CLASS" not in constants
    assert {"H", "W", "C", "N"} <= constants  # the conv's shape is: one model, one shape
    assert "SLICE_CLASS" in slice_conv_triton._autotuned_kernel.keys
    assert isinstance(slice_conv_triton._autotuned_kernel, triton.runtime.Autotuner)


def test_a_clips_last_frames_share_the_first_batchs_tuning_and_batch_sizes_keep_their_own():
    """Every new autotuning key times all six tiles (most of a second): a clip's last 1-3
    frames (16-48 slices, by the clip's length) must not each be one (session 28: the first
    compiled clip of a ComfyUI process paid it at its last frames)."""
    pytest.importorskip("triton")
    from ditto_core.models.slice_conv_triton import slice_class

    frames = lambda n: 16 * n  # noqa: E731 - sixteen depth slices a frame
    assert {slice_class(frames(n)) for n in (1, 2, 3, 4)} == {64}
    assert [slice_class(frames(n)) for n in (5, 8, 9, 16, 32)] == [128, 128, 256, 256, 512]
    assert slice_class(1) == 64 and slice_class(513) == 1024


@pytest.mark.reliability(
    area="Soak and faults",
    case="the mask conv's autotuner times its tiles (a shape its cache lacks, on the priming thread) while "
         "another thread records a CUDA graph (the LMDM's window)",
    behaviour="each timing waits for the recording to end and holds off new ones (unguarded, its device "
              "synchronise breaks the recording and aborts the process)")
def test_timing_a_tile_waits_for_a_recording_on_another_thread(monkeypatch):
    """Triton times a tile between device synchronises, which break a CUDA-graph recording on
    another thread and abort the process (a new process's priming thread tunes a shape while the
    main thread records the LMDM's window): the autotuner times through a device-wide turn."""
    triton = pytest.importorskip("triton")
    from ditto_core import cuda_graphs
    from ditto_core.models import slice_conv_triton

    if "do_bench" in inspect.signature(triton.autotune).parameters:  # Triton >= 3.2
        assert slice_conv_triton._autotuned_kernel.do_bench is slice_conv_triton._timed_between_recordings
    timed = []
    monkeypatch.setattr(slice_conv_triton, "_benchmarker", lambda: lambda call, quantiles: timed.append(
        (cuda_graphs._running["device_wide"], quantiles)) or call())
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: False)  # the CLI's allocator
    results = []
    with recording_elsewhere():
        timing, = started_and_waiting(lambda: results.append(
            slice_conv_triton._timed_between_recordings(lambda: [0.3, 0.2, 0.4], (0.5, 0.2, 0.8))))
        assert timed == []  # held while the graph is recorded
    timing.join(10)
    assert timed == [(1, (0.5, 0.2, 0.8))] and results == [[0.3, 0.2, 0.4]]
