"""Precision names: one vocabulary for the library, the CLI, the nodes and the benchmarks.

Two things have a precision. The image networks (extractors, warp network, decoder) store
weights and compute in :data:`NETWORK_PRECISIONS`; the LMDM sampler keeps fp32 weights and runs
its matrix products in :data:`LMDM_PRECISIONS` (``tf32`` only rounds the products' inputs, so it
has no dtype of its own). Kept free of torch so the CLI can check its options instantly.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

NETWORK_PRECISIONS = ("fp32", "fp16", "bf16")
"""Weights and activations of the image networks; fp32 reproduces the reference."""
LMDM_PRECISIONS = ("fp32", "tf32", "bf16")
"""Matrix-product precision of the LMDM sampler; fp32 reproduces the reference."""
LMDM_PRECISION_CHOICES = ("auto", *LMDM_PRECISIONS)
"""What the options, the CLI and the nodes accept for the LMDM: ``auto`` is resolved by
:func:`lmdm_precision_for` from the image networks' precision."""
_DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def lmdm_precision_for(choice: str, networks: "torch.dtype") -> str:
    """The LMDM precision that ``choice`` means beside image networks of dtype ``networks``.

    ``auto`` is fp32 beside fp32 networks (the reference's numbers end to end) and tf32 beside
    half-precision ones: their own error (fp16 warp+decode 5e-4 rel-L2 against fp32) is of the
    size tf32 leaves on the motion (6.8e-4), and tf32 halves the sampler's time. Any other
    choice is itself.
    """
    if choice != "auto":
        return choice
    return "fp32" if str(networks) == f"torch.{_DTYPE_NAMES['fp32']}" else "tf32"


def network_dtype(precision: str) -> "torch.dtype":
    """The torch dtype of a :data:`NETWORK_PRECISIONS` name (KeyError for any other)."""
    import torch  # here, not at the top: see the module docstring

    return getattr(torch, _DTYPE_NAMES[precision])
