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
