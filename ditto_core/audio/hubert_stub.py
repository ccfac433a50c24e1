"""A tiny stand-in for Ditto's streaming HuBERT ONNX model, for tests and benchmarks.

It has the official model's interface (input ``input_values`` float32 ``(1, samples)``, output
``encoding_out`` float32 ``(rows, 1024)`` at HuBERT's 50 Hz framing: 400-sample windows every
320 samples) and a computation simple enough to redo independently with numpy:

    rows = conv1d(input, weight, bias, stride=320)ᵀ      # a linear projection of each frame
    encoding_out = rows + mean(rows, over the rows)        # every row sees its whole window

The second term stands in for attention: a row depends on the window it was computed in, so
any mistake in where windows start or end changes the output.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import numpy as np

FRAME_LENGTH = 400  # HuBERT's conv front-end: receptive field and hop, in samples
FRAME_HOP = 320
OPSET = 17


def write_stub_hubert(
    path: Union[str, os.PathLike],
    seed: int = 0,
    width: int = 1024,
    keep_batch_axis: bool = False,
) -> Path:
    """Write the stub model to ``path`` and return it.

    ``width`` other than 1024 or ``keep_batch_axis`` (output ``(1, rows, width)``) make the
    variants the extractor must reject or accept.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((width, 1, FRAME_LENGTH)) / np.sqrt(FRAME_LENGTH)).astype(np.float32)
    bias = (0.02 * rng.standard_normal(width)).astype(np.float32)
    nodes = [
        helper.make_node("Unsqueeze", ["input_values", "axis_1"], ["signal"]),  # (1, 1, samples)
        helper.make_node("Conv", ["signal", "weight", "bias"], ["framed"], strides=[FRAME_HOP]),
        helper.make_node("Transpose", ["framed"], ["rows"], perm=[0, 2, 1]),  # (1, rows, width)
        helper.make_node("ReduceMean", ["rows"], ["context"], axes=[1], keepdims=1),
        helper.make_node("Add", ["rows", "context"], ["batched" if not keep_batch_axis else "encoding_out"]),
    ]
    out_shape: list = ["rows", width]
    if keep_batch_axis:
        out_shape = [1, *out_shape]
    else:
        nodes.append(helper.make_node("Squeeze", ["batched", "axis_0"], ["encoding_out"]))
    graph = helper.make_graph(
        nodes,
        "hubert_stub",
        inputs=[helper.make_tensor_value_info("input_values", TensorProto.FLOAT, [1, "samples"])],
        outputs=[helper.make_tensor_value_info("encoding_out", TensorProto.FLOAT, out_shape)],
        initializer=[
            numpy_helper.from_array(weight, "weight"),
            numpy_helper.from_array(bias, "bias"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis_1"),
            *([] if keep_batch_axis else [numpy_helper.from_array(np.array([0], dtype=np.int64), "axis_0")]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by every onnxruntime the pack supports (>= 1.17)
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, str(path))
    return path
