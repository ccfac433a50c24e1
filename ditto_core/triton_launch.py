"""The CUDA device an eager Triton launch runs under.

Triton launches a kernel on the *current* CUDA device and its current stream, not on its
arguments' device: a pipeline on another GPU (``cuda:1`` while ``cuda:0`` is current, or any
thread whose current device is still 0) would have its kernels read one device's memory from
another, outside that device's stream order. Every eager launch of ours (the networks', the
put-back's, the colour conversion's) therefore runs under :func:`launch_device`; compiled code
sets the device itself.
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor

__all__ = ["launch_device"]


def launch_device(tensor: Tensor) -> contextlib.AbstractContextManager:
    """``tensor``'s CUDA device made current for the block; nothing for a CPU tensor (Triton's
    interpreter)."""
    return torch.cuda.device(tensor.device) if tensor.is_cuda else contextlib.nullcontext()
