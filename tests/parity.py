"""The parity metric of the reference kit (``shared/reference/README.md`` section 4)."""
import torch


def rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    """``||got - ref|| / ||ref||`` computed in float64."""
    got = got.detach().double().cpu()
    ref = ref.detach().double().cpu()
    return ((got - ref).norm() / ref.norm()).item()


def strict_load(module: torch.nn.Module, path) -> torch.nn.Module:
    """``module`` with a bare-state-dict official file loaded strictly, no inference rewrites."""
    module.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    return module.eval()


def keypoint_pair(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, 21, 3) source keypoints inside the warp grid and driving keypoints near them."""
    g = torch.Generator().manual_seed(seed)
    kp_source = torch.rand(batch, 21, 3, generator=g) * 1.6 - 0.8
    return kp_source, kp_source + 0.1 * torch.randn(batch, 21, 3, generator=g)
