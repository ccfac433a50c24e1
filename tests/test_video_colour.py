"""RGB -> yuv420p on the device against swscale, and the colour tags players read."""
from __future__ import annotations

import av
import cv2
import numpy as np
import pytest
import torch
from av.video.reformatter import ColorRange, Colorspace, Interpolation

from ditto_core.video.colour import pad_to_even, rgb_to_yuv420p
from ditto_core.video.writer import VideoWriter
from tests.conftest import EXAMPLE
from tests.triton_interpreter import run_interpreted

PORTRAIT = EXAMPLE / "portrait.jpg"  # DITTO_SHARED, as every test finds the shared data


def swscale_yuv420p(image: np.ndarray, interpolation=Interpolation.AREA) -> np.ndarray:
    """swscale's BT.709 limited-range conversion of one (H, W, 3) RGB image, packed (H*3/2, W)."""
    frame = av.VideoFrame.from_ndarray(image, format="rgb24")
    return frame.reformat(format="yuv420p", dst_colorspace=Colorspace.ITU709, dst_color_range=ColorRange.MPEG,
                          interpolation=interpolation).to_ndarray()


def images() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    found = [("random", rng.integers(0, 256, (70, 98, 3), dtype=np.uint8)),  # H % 4 == 2, W / 2 odd
             ("extremes", rng.choice(np.array([0, 255], np.uint8), (32, 48, 3)))]
    portrait = cv2.imread(str(PORTRAIT), cv2.IMREAD_COLOR)
    assert portrait is not None, f"the example portrait is missing at {PORTRAIT}; set DITTO_SHARED"
    found.append(("portrait", cv2.cvtColor(portrait, cv2.COLOR_BGR2RGB)[100:420, 200:680].copy()))
    return found


@pytest.mark.parametrize("name, image", images(), ids=[name for name, _ in images()])
def test_conversion_matches_swscale_within_one_level(name, image):
    ours = rgb_to_yuv420p(torch.from_numpy(image)[None])[0].numpy().astype(int)
    theirs = swscale_yuv420p(image).astype(int)
    assert ours.shape == theirs.shape == (image.shape[0] * 3 // 2, image.shape[1])
    difference = np.abs(ours - theirs)
    assert difference.max() <= 1, (name, difference.max())
    assert (difference > 0).mean() < 0.05
    # Luma has no filter: the default (bilinear) swscale agrees on it too.
    luma = image.shape[0] * image.shape[1]
    default = swscale_yuv420p(image, interpolation=None).reshape(-1)[:luma].astype(int)
    assert np.abs(ours.reshape(-1)[:luma] - default).max() <= 1


def test_backend_is_checked():
    frames = torch.zeros(1, 4, 4, 3, dtype=torch.uint8)
    with pytest.raises(ValueError, match="auto, triton, torch"):
        rgb_to_yuv420p(frames, backend="cuda")
    with pytest.raises(ValueError, match="needs CUDA frames"):
        rgb_to_yuv420p(frames, backend="triton")
    assert torch.equal(rgb_to_yuv420p(frames, backend="torch"), rgb_to_yuv420p(frames))


def test_batch_and_padding():
    rng = np.random.default_rng(1)
    frames = torch.from_numpy(rng.integers(0, 256, (6, 21, 35, 3), dtype=np.uint8))
    padded = pad_to_even(frames)
    assert padded.shape == (6, 22, 36, 3)
    assert torch.equal(padded[:, :21, 35], frames[:, :, 34]) and torch.equal(padded[:, 21], padded[:, 20])
    batch = rgb_to_yuv420p(padded)
    assert all(torch.equal(batch[i], rgb_to_yuv420p(padded[i : i + 1])[0]) for i in range(6))
    with pytest.raises(ValueError, match="even"):
        rgb_to_yuv420p(frames)


def test_written_video_is_tagged_bt709_limited_and_decodes_to_its_colours(tmp_path):
    # 16x16 patches of saturated colours: 4:2:0 chroma is exact inside each patch, and the
    # BT.601 and BT.709 matrices disagree by tens of levels on them.
    rng = np.random.default_rng(2)
    patches = rng.choice(np.array([0, 40, 128, 215, 255], np.uint8), (4, 6, 3))
    image = np.repeat(np.repeat(patches, 16, axis=0), 16, axis=1)
    inside = np.zeros(image.shape[:2], bool)
    for row in range(4):
        inside[row * 16 + 3 : row * 16 + 13] = True
    inside[:, [c for c in range(96) if c % 16 < 3 or c % 16 >= 13]] = False
    frames = torch.from_numpy(np.stack([image] * 3))
    for encoders in (1, 2):
        target = tmp_path / f"tagged_{encoders}.mp4"
        with VideoWriter(target, width=96, height=64, crf=0, preset="ultrafast", encoders=encoders,
                         segment_frames=2) as writer:
            writer.write(frames)
        with av.open(str(target)) as container:
            context = container.streams.video[0].codec_context
            assert (context.colorspace, context.color_primaries, context.color_trc, context.color_range) == \
                   (1, 1, 1, 1)  # BT.709 matrix, primaries and transfer; MPEG (limited) range
            frame = next(container.decode(video=0))
        errors = {}
        for matrix in (Colorspace.ITU709, Colorspace.ITU601):
            decoded = frame.reformat(format="rgb24", src_colorspace=matrix, src_color_range=ColorRange.MPEG)
            errors[matrix] = np.abs(decoded.to_ndarray().astype(int) - image.astype(int))[inside].max()
        assert errors[Colorspace.ITU709] <= 3 < 10 < errors[Colorspace.ITU601], errors


@pytest.mark.gpu
def test_cuda_conversion_matches_the_cpu_one():
    rng = np.random.default_rng(3)
    frames = torch.from_numpy(rng.integers(0, 256, (9, 270, 482, 3), dtype=np.uint8))
    cpu = rgb_to_yuv420p(frames)
    cuda = rgb_to_yuv420p(frames.cuda(), backend="triton").cpu()
    cuda_torch = rgb_to_yuv420p(frames.cuda(), backend="torch").cpu()
    assert torch.equal(rgb_to_yuv420p(frames.cuda()).cpu(), cuda)  # auto: the kernel
    for reference in (cpu, cuda_torch):
        difference = (cuda.int() - reference.int()).abs()
        assert difference.max() <= 1 and (difference > 0).float().mean() < 1e-3
    theirs = swscale_yuv420p(frames[4].numpy()).astype(int)
    assert np.abs(cuda[4].numpy().astype(int) - theirs).max() <= 1


INTERPRETED_KERNEL = """
import json
import cv2, numpy as np, torch
from ditto_core.video import colour
from ditto_core.video.colour_triton import rgb_to_yuv420p_triton
rng = np.random.default_rng(4)
portrait = cv2.cvtColor(cv2.imread(%r, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)[200:330, 300:818]
cases = {
    "random, chroma width not a multiple of the block": rng.integers(0, 256, (3, 14, 1030, 3), dtype=np.uint8),
    "extremes": rng.choice(np.array([0, 255], np.uint8), (2, 8, 12, 3)),
    "portrait": portrait[None].copy(),
}
result = {}
for name, frames in cases.items():
    frames = torch.from_numpy(frames)
    n, h, w = frames.shape[:3]
    out = torch.full((n, h * 3 // 2, w), 7, dtype=torch.uint8)
    got = rgb_to_yuv420p_triton(frames, out, colour._RGB_TO_YUV, colour._OFFSETS)
    want = colour.rgb_to_yuv420p(frames)  # the CPU tensors take the PyTorch arithmetic
    diff = (got.int() - want.int()).abs()
    result[name] = {"same_tensor": got is out, "shape": list(got.shape), "max": int(diff.max()),
                    "unequal": float((diff > 0).float().mean())}
print(json.dumps(result))
"""


def test_triton_kernel_computes_the_pytorch_conversion_in_the_interpreter():
    result = run_interpreted(INTERPRETED_KERNEL % str(PORTRAIT))
    assert set(result) == {"random, chroma width not a multiple of the block", "extremes", "portrait"}
    for name, got in result.items():
        assert got["same_tensor"], name
        # The interpreter rounds as numpy does, PyTorch's CPU kernels may fuse a multiply-add:
        # a value exactly on a level boundary can land on either side.
        assert got["max"] <= 1 and got["unequal"] < 1e-3, (name, got)
    assert result["random, chroma width not a multiple of the block"]["shape"] == [3, 21, 1030]


@pytest.mark.parametrize("capability", [80, 90], ids=["ampere", "hopper"])
def test_triton_kernel_builds_for_ampere_and_hopper(capability):
    pytest.importorskip("triton")
    from ditto_core.video import colour, colour_triton
    from tests.test_triton_kernels import _compile

    built = _compile(colour_triton._yuv420p_kernel, dict(rgb_ptr="*u8", out_ptr="*u8"), ["height", "width"],
                     colour_triton.kernel_constants(colour._RGB_TO_YUV, colour._OFFSETS), capability,
                     num_warps=colour_triton._NUM_WARPS)
    assert built.asm.get("cubin")
