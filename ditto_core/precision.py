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
_DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def network_dtype(precision: str) -> "torch.dtype":
    """The torch dtype of a :data:`NETWORK_PRECISIONS` name (KeyError for any other)."""
    import torch  # here, not at the top: see the module docstring

    return getattr(torch, _DTYPE_NAMES[precision])
