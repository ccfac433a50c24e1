"""Export a :class:`~.hubert.Hubert` as ONNX with the interface of Ditto's streaming HuBERT.

``input_values`` float32 ``(1, samples)`` -> ``encoding_out`` float32 ``(rows, hidden)``: the
batch axis is dropped from the output, as in ``hubert_streaming_fix_kv.onnx``. Used to write a
HuBERT-large of the official architecture for benchmarks (``bench/make_hubert_large.py``) and
the small graphs the weight-mapping tests read.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Optional, Union

import torch
from torch import Tensor, nn

from .hubert import Hubert, HubertConfig

INPUT_NAME = "input_values"
OUTPUT_NAME = "encoding_out"


def random_hubert(config: HubertConfig = HubertConfig(), seed: int = 0) -> Hubert:
    """A :class:`~.hubert.Hubert` with seeded random weights, fp32, eval mode.

    PyTorch's default initialisation, except that norms get weights near 1 and every bias a
    small random value: as in a trained model no two tensors are equal, so exporters cannot
    merge them and a mapping that confused two layers would show in the output.
    """
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = Hubert(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            module, kind = name.rsplit(".", 1)
            if "norm" in module.rsplit(".", 1)[-1] and kind == "weight":
                param.copy_(1 + 0.1 * noise)
            elif kind == "bias":
                param.copy_(0.02 * noise)
    return model.requires_grad_(False)


class _StreamingInterface(nn.Module):
    """(1, samples) -> (rows, hidden), the official graph's signature."""

    def __init__(self, model: Hubert) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_values: Tensor) -> Tensor:
        return self.model(input_values)[0]


def export_hubert_onnx(
    model: Hubert,
    path: Union[str, os.PathLike],
    num_samples: Optional[int] = None,
    dynamo: bool = False,
    constant_folding: bool = True,
    weight_norm: bool = True,
    opset: int = 17,
    example_samples: int = 6480,
) -> Path:
    """Write ``model`` (fp32) to ``path`` and return it.

    Args:
        num_samples: a fixed input length (e.g. 6480), or None for a dynamic ``samples`` axis.
        dynamo: the ``torch.export``-based exporter (needs onnxscript) instead of TorchScript.
        constant_folding: TorchScript exporter only: fold constant subgraphs (weight norm,
            transposed linear weights) into single initializers.
        weight_norm: export the positional conv through weight normalisation (``g`` and ``v``
            kept as parameters), as HuBERT checkpoints hold it.
        opset: ONNX opset; below 17 the exporters write layer norms as elementary ops.
    """
    model = copy.deepcopy(model).float().eval()
    if weight_norm:
        torch.nn.utils.parametrizations.weight_norm(model.encoder.pos_conv.conv, name="weight", dim=2)
    wrapper = _StreamingInterface(model).eval()
    example = torch.zeros(1, num_samples or example_samples)
    path = Path(path)
    kwargs: dict = dict(input_names=[INPUT_NAME], output_names=[OUTPUT_NAME], opset_version=opset)
    if dynamo:
        dynamic = None if num_samples else ({1: torch.export.Dim("samples", min=400, max=1_000_000)},)
        program = torch.onnx.export(wrapper, (example,), dynamo=True, dynamic_shapes=dynamic, **kwargs)
        program.save(str(path))
    else:
        axes = None if num_samples else {INPUT_NAME: {1: "samples"}, OUTPUT_NAME: {0: "rows"}}
        with torch.no_grad():
            torch.onnx.export(wrapper, (example,), str(path), dynamo=False, dynamic_axes=axes,
                              do_constant_folding=constant_folding, **kwargs)
    return path
