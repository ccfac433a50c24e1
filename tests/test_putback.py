"""Put-back: feather mask, OpenCV reference path, PyTorch path and (on a GPU) the Triton kernel."""
from __future__ import annotations

import math
import sys

import cv2
import numpy as np
import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.render import putback
from ditto_core.render.feather_mask import feather_mask
from ditto_core.render.putback import paste_back, paste_back_cv2
from ditto_core.render.putback_geometry import paste_bounds
from tests.parity import rel_l2

# OpenCV 5 interpolates warpAffine at float precision; the reference ran OpenCV 4, whose
# fixed-point 1/32-pixel interpolation is what the case's bytes record.


def uint8_stats(got: torch.Tensor | np.ndarray, ref: torch.Tensor | np.ndarray) -> tuple[int, float, float]:
    """Max and mean absolute difference, and PSNR in dB, of two uint8 images."""
    diff = torch.as_tensor(got).cpu().double() - torch.as_tensor(ref).cpu().double()
    mse = diff.square().mean().item()
    psnr = math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)
    return int(diff.abs().max().item()), diff.abs().mean().item(), psnr


def assert_parity(got, ref, max_diff: int = 2, mean_diff: float = 0.1, min_psnr: float = 50.0) -> None:
    worst, mean, psnr = uint8_stats(got, ref)
    assert worst <= max_diff and mean <= mean_diff and psnr >= min_psnr, (worst, mean, psnr)


@pytest.fixture(scope="module")
def case(load_case):
    data = load_case("putback")
    inputs = data["inputs"]
    return {
        "frame": inputs["frame_rgb"],  # (H, W, 3) uint8
        "render_hwc": inputs["render"],  # (512, 512, 3) float in [0, 255]
        "render": (inputs["render"] / 255.0).permute(2, 0, 1).contiguous(),  # (3, 512, 512) in [0, 1]
        "M_c2o": inputs["M_c2o"],
        "result": data["outputs"]["result"],
        "mask": data["outputs"]["mask"],
    }


def random_affine(scale: float, degrees: float, tx: float, ty: float) -> torch.Tensor:
    """Crop -> frame affine: rotate and scale about the crop centre, then put it at (tx, ty)."""
    rotation = cv2.getRotationMatrix2D((255.5, 255.5), degrees, scale)
    rotation[:, 2] += np.array([tx, ty]) - 255.5
    return torch.from_numpy(np.vstack([rotation, [0, 0, 1]])).float()


def cv2_batch(frames: torch.Tensor, renders: torch.Tensor, M_c2o: torch.Tensor) -> torch.Tensor:
    """Per-frame OpenCV put-back of (N, ...) aligned inputs, as the reference would loop."""
    outs = [
        paste_back_cv2(f.numpy(), (r * 255).permute(1, 2, 0).numpy(), m.numpy())
        for f, r, m in zip(frames, renders.float(), M_c2o)
    ]
    return torch.from_numpy(np.stack(outs))


@pytest.fixture(scope="module")
def batch():
    """Three 360x640 frames, three renders and three different affines (one partly off-frame)."""
    gen = torch.Generator().manual_seed(7)
    frames = torch.randint(0, 256, (3, 360, 640, 3), dtype=torch.uint8, generator=gen)
    # Smooth content, like a face: on white noise OpenCV 4's 1/32-pixel positions alone move
    # values by up to ~8, which would say nothing about our code.
    coarse = torch.rand(3, 3, 32, 32, generator=gen)
    renders = torch.nn.functional.interpolate(coarse, size=512, mode="bilinear", align_corners=False)
    M_c2o = torch.stack(
        [random_affine(0.5, 0.0, 200, 180), random_affine(0.7, 12.0, 420, 150), random_affine(0.9, -20.0, 600, 60)]
    )
    return frames, renders, M_c2o


def test_feather_mask_matches_reference(case):
    mask = feather_mask()
    assert mask.shape == (512, 512) and mask.dtype == torch.float32
    assert rel_l2(mask, case["mask"][..., 0]) < 1e-6


def test_feather_mask_shape_and_range():
    mask = feather_mask(64, 0.5)
    assert mask.shape == (64, 64)
    assert mask[16:48, 16:48].eq(1).all(), "the inner square is opaque"
    assert mask[0, 0] == 0 and mask[0, 32] == 0, "the crop edge is transparent"
    assert torch.equal(mask, mask.T) and torch.equal(mask, mask.flip(0).flip(1))
    with pytest.raises(InputError, match="ratio"):
        feather_mask(64, 1.5)


def test_cv2_path_parity(case):
    got = paste_back_cv2(case["frame"].numpy(), case["render_hwc"].numpy(), case["M_c2o"].numpy())
    assert got.dtype == np.uint8 and got.shape == (720, 1280, 3)
    assert_parity(got, case["result"], max_diff=1, mean_diff=0.03)


def test_torch_path_parity(case):
    got = paste_back(case["frame"][None], case["render"][None], case["M_c2o"][None])
    assert got.shape == (1, 720, 1280, 3) and got.dtype == torch.uint8
    assert_parity(got[0], case["result"])


def test_torch_path_accepts_half_renders(case):
    full = paste_back(case["frame"][None], case["render"][None], case["M_c2o"][None])
    half = paste_back(case["frame"][None], case["render"][None].half(), case["M_c2o"][None])
    assert_parity(half, full, max_diff=2, mean_diff=0.1)


def test_batched_affines_per_frame(batch):
    frames, renders, M_c2o = batch
    got = paste_back(frames, renders, M_c2o)
    expected = cv2_batch(frames, renders, M_c2o)
    for g, e in zip(got, expected):
        assert_parity(g, e)
    # Outside each frame's box nothing changes, and the boxes differ per frame.
    bounds = paste_bounds(M_c2o, 512, 360, 640).tolist()
    assert len({tuple(b) for b in bounds}) == 3
    for g, f, (x0, y0, x1, y1) in zip(got, frames, bounds):
        keep = torch.ones(360, 640, dtype=torch.bool)
        keep[y0:y1, x0:x1] = False
        assert torch.equal(g[keep], f[keep])
        assert not torch.equal(g, f)


def test_paste_bounds_box_the_render_square_clipped_to_the_frame():
    """Each box is the mapped square (-1, R)^2's bounding box widened by a pixel, clipped to the frame
    (numpy's float64 products as the oracle), for affines landing inside, across and outside it."""
    rng = np.random.default_rng(4)
    M = np.zeros((64, 3, 3))
    M[:, :2, :2] = rng.uniform(-1.5, 1.5, (64, 2, 2))
    M[:, :2, 2] = rng.uniform(-900, 1500, (64, 2))
    M[:, 2, 2] = 1
    got = paste_bounds(torch.from_numpy(M).float(), 512, 360, 640).numpy()
    corners = np.array([[-1, -1, 1], [512, -1, 1], [-1, 512, 1], [512, 512, 1]], dtype=np.float64)
    mapped = np.einsum("sij,kj->ski", M[:, :2].astype(np.float32).astype(np.float64), corners)
    low = np.clip(np.floor(mapped.min(axis=1)), 0, [640, 360])
    high = np.clip(np.ceil(mapped.max(axis=1)) + 1, 0, [640, 360])
    np.testing.assert_array_equal(got, np.concatenate([low, high], axis=1).astype(np.int32))
    assert (got[:, 2:] == got[:, :2]).any() and ((got[:, 2:] > got[:, :2]).all(axis=1)).any()  # empty and real boxes


def test_source_index_selects_frame_and_affine(batch):
    frames, renders, M_c2o = batch
    sources, sources_M = frames[:2], M_c2o[:2]
    index = torch.tensor([1, 0, 1])
    got = paste_back(sources, renders, sources_M, source_index=index)
    expected = paste_back(sources[index], renders, sources_M[index])
    assert torch.equal(got, expected)
    assert_parity(got, cv2_batch(sources[index], renders, sources_M[index]))


def test_out_and_in_place(batch):
    frames, renders, M_c2o = batch
    fresh = paste_back(frames, renders, M_c2o)
    out = torch.empty_like(frames)
    assert paste_back(frames, renders, M_c2o, out=out) is out
    assert torch.equal(out, fresh)
    in_place = frames.clone()
    paste_back(in_place, renders, M_c2o, out=in_place)
    assert torch.equal(in_place, fresh)


def test_bad_inputs_raise_input_error(batch):
    frames, renders, M_c2o = batch
    with pytest.raises(InputError, match="frames"):
        paste_back(frames.float(), renders, M_c2o)
    with pytest.raises(InputError, match="renders"):
        paste_back(frames, renders[:, :2], M_c2o)
    with pytest.raises(InputError, match="source_index"):
        paste_back(frames[:1], renders, M_c2o[:1])
    with pytest.raises(InputError, match="M_c2o"):
        paste_back(frames, renders, M_c2o[:2])
    with pytest.raises(InputError, match="triton"):
        paste_back(frames, renders, M_c2o, backend="triton")


def test_module_works_without_triton(monkeypatch, batch):
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    monkeypatch.delitem(sys.modules, "ditto_core.render.putback_triton", raising=False)
    putback._triton_impl.cache_clear()
    try:
        assert putback._triton_impl() is None
        frames, renders, M_c2o = batch
        assert paste_back(frames[:1], renders[:1], M_c2o[:1]).shape == (1, 360, 640, 3)
    finally:
        putback._triton_impl.cache_clear()


@pytest.mark.gpu
def test_triton_parity_and_agreement_with_torch(case, batch):
    pytest.importorskip("triton")
    device = torch.device("cuda")
    frame, render, M = case["frame"][None].to(device), case["render"][None].to(device), case["M_c2o"][None].to(device)
    fused = paste_back(frame, render, M, backend="triton")
    assert_parity(fused[0], case["result"])
    torch_path = paste_back(frame, render, M, backend="torch")
    worst, mean, _ = uint8_stats(fused, torch_path)
    assert worst <= 1 and mean < 1e-3

    frames, renders, M_c2o = (t.to(device) for t in batch)
    index = torch.tensor([2, 0, 2, 1, 2, 0], device=device)
    many = renders[torch.tensor([0, 1, 2, 0, 1, 2], device=device)].bfloat16()
    fused = paste_back(frames, many, M_c2o, source_index=index, backend="triton")
    torch_path = paste_back(frames, many, M_c2o, source_index=index, backend="torch")
    worst, mean, _ = uint8_stats(fused, torch_path)
    assert worst <= 1 and mean < 1e-3


@pytest.mark.gpu
def test_triton_paste_back_queues_behind_the_render_without_waiting(batch):
    """No host synchronisation in a put-back: the render loop queues it behind the render of the
    same frames and goes on issuing work while the GPU renders."""
    pytest.importorskip("triton")
    frames, renders, M_c2o = (t.cuda() for t in batch)
    expected = paste_back(frames, renders, M_c2o, backend="triton")  # the first call loads the kernel
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = paste_back(frames, renders, M_c2o, backend="triton")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.equal(got, expected)
