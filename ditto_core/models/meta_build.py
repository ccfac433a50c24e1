"""Whether modules are being built on the meta device, where nothing should be computed.

:func:`~ditto_core.models.checkpoints.build_network` builds every network under
``torch.device("meta")`` and then takes the checkpoint's tensors as the module's own. Values a
constructor computes (initialisations, schedules, frequency tables) are wasted there, and on
the meta device most of them run PyTorch's Python reference kernels, whose first use imports
Dynamo: seconds of a new process that never compiles anything. Constructors ask this first.
"""
from __future__ import annotations

import torch

__all__ = ["building_on_meta"]


def building_on_meta() -> bool:
    """True inside ``with torch.device("meta")`` (an empty tensor is the one op that stays C++)."""
    return torch.empty(0).is_meta
