"""The parity metric of the reference kit (``shared/reference/README.md`` section 4)."""
import torch


def rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    """``||got - ref|| / ||ref||`` computed in float64."""
    got = got.detach().double().cpu()
    ref = ref.detach().double().cpu()
    return ((got - ref).norm() / ref.norm()).item()
