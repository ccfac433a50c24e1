"""Read a HuBERT ONNX graph (Ditto's ``hubert_streaming_fix_kv.onnx``) into :class:`~.hubert.Hubert`.

The weights are found by what the graph computes, never by initializer names: exporters rename,
deduplicate (every fresh layer norm holds the same ones and zeros, so one initializer serves
them all) and fold weights (linear weights stored transposed, weight norm ``g * v / ||v||``
folded into one tensor or kept as a subgraph). Reading goes in three steps:

1. **Specialise and fold.** Shapes are inferred for one window (the graph's fixed input
   length, else 6480 samples), so ``Shape`` nodes become constants; every node whose inputs
   are all constant is then evaluated with onnx's reference evaluator (weight transposes,
   weight norm, the attention scale computed from shapes). What remains is the computation on
   the speech.
2. **Find the layers** in the remaining nodes, in graph order: convolutions with constant
   weights, linear layers (``MatMul`` with a constant matrix, or ``Gemm``), layer norms
   (``LayerNormalization`` or its elementary form), group norms (``GroupNormalization`` or
   ``InstanceNormalization`` + affine). Dependencies fix their order: the conv stack, the
   projection, then per transformer layer four attention projections, two feed-forward ones
   and two norms. Query, key and value are told apart by where their outputs go (the left and
   right side of the score product, the right side of the context product), the norm
   placement by what the first residual sum adds.
3. **Check** everything a wrong mapping could hide: the op sequence, the attention (a plain
   scaled softmax, no mask or bias), the activation (exact GELU, one per conv layer, for the
   positions and per feed-forward), one epsilon, the input reaching the first convolution
   unchanged, the output being the last norm, and every weight-sized constant accounted for.

Anything else is refused with a :class:`~ditto_core.errors.CheckpointError` naming the file and
what did not match. Memory: the file is parsed once (a 1.26 GB HuBERT-large needs about twice
that in host memory while it is read); the arrays become the module's tensors without a copy.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ..errors import CheckpointError
from .hubert import Hubert, HubertConfig

DEFAULT_PROBE_SAMPLES = 6480  # one Ditto window: the length a dynamic graph is specialised to
_TRANSPARENT = {"Identity", "Cast", "Dropout", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten",
                "Expand"}
_FLOAT_TYPES = (np.float16, np.float32, np.float64)


class _Unmappable(Exception):
    """Internal: the graph is not a HuBERT we can map; the message says what differs."""


@dataclass
class _Layer:
    """One weight-bearing op found in the graph (after folding)."""

    kind: str  # "conv", "linear", "layer_norm", "group_norm"
    input: str  # the tensor it reads
    output: str  # the tensor it produces (after its bias / affine ops)
    params: dict[str, np.ndarray]
    order: int  # position of its main node in the graph
    attrs: dict = field(default_factory=dict)
    uses: set[str] = field(default_factory=set)  # the graph constants its parameters came from


class _FoldedGraph:
    """The graph specialised to one input length, constant subgraphs evaluated."""

    def __init__(self, model, num_samples: int) -> None:
        from onnx import numpy_helper

        graph = model.graph
        self.opsets = list(model.opset_import)
        self.input = graph.input[0].name
        self.output = graph.output[0].name
        self.consts: dict[str, np.ndarray] = {}
        for init in graph.initializer:
            self.consts[init.name] = numpy_helper.to_array(init)
        # Folding makes reshape targets constant, which lets inference fix more shapes, which
        # lets more Shape nodes fold: a few rounds reach the fixed point.
        nodes, self.shapes = list(graph.node), {}
        for _ in range(8):
            self.shapes = self._infer_shapes(nodes, graph, model.ir_version, num_samples)
            kept = []
            for node in nodes:
                value = self._fold(node)
                if value is None:
                    kept.append(node)
                else:
                    self.consts.update(zip(node.output, value))
            if len(kept) == len(nodes):
                break
            nodes = kept
        self.nodes = nodes
        self.producer = {out: node for node in self.nodes for out in node.output}
        self.consumers: dict[str, list] = {}
        for node in self.nodes:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def _infer_shapes(self, nodes: list, graph, ir_version: int, num_samples: int) -> dict[str, tuple]:
        """Static shapes of every tensor for an input of ``(1, num_samples)``.

        Inference runs on the remaining nodes with the weights declared by type and shape
        only, so a large file is never serialised a second time.
        """
        import onnx
        from onnx import helper, numpy_helper

        small, weights = [], []
        for name, value in self.consts.items():
            if value.size <= 64 or value.dtype not in _FLOAT_TYPES:
                small.append(numpy_helper.from_array(value, name))
            else:
                weights.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                                             value.shape))
        elem = graph.input[0].type.tensor_type.elem_type
        inputs = [helper.make_tensor_value_info(self.input, elem, [1, num_samples]), *weights]
        light = helper.make_graph(nodes, "shapes", inputs, list(graph.output), initializer=small)
        light_model = helper.make_model(light, opset_imports=self.opsets)
        light_model.ir_version = ir_version
        try:
            inferred = onnx.shape_inference.infer_shapes(light_model, data_prop=True)
        except Exception as err:  # onnx raises several untyped inference errors
            raise _Unmappable(f"onnx shape inference failed ({err})") from err
        shapes = {}
        for info in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
            dims = info.type.tensor_type.shape.dim
            if info.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
                shapes[info.name] = tuple(d.dim_value for d in dims)
        return shapes

    def _fold(self, node) -> Optional[list[np.ndarray]]:
        """The outputs of ``node`` if they do not depend on the speech, else None."""
        from onnx import helper, numpy_helper

        if node.op_type == "Constant" and node.attribute[0].name == "value":
            return [numpy_helper.to_array(node.attribute[0].t)]
        if node.op_type in ("Shape", "Size") and node.input[0] in self.shapes:
            shape = np.array(self.shapes[node.input[0]], dtype=np.int64)
            if node.op_type == "Size":
                return [np.array(shape.prod(), dtype=np.int64)]
            attrs = {a.name: a.i for a in node.attribute}
            return [shape[attrs.get("start", 0) : attrs.get("end", len(shape))]]
        inputs = [name for name in node.input if name]
        if (not inputs and node.op_type != "Constant") or any(name not in self.consts for name in inputs):
            return None
        from onnx import TypeProto
        from onnx.reference import ReferenceEvaluator

        feeds = {name: self.consts[name] for name in inputs}
        values = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                  for name, a in feeds.items()]
        outputs = [helper.make_value_info(name, TypeProto()) for name in node.output]
        one = helper.make_model(helper.make_graph([node], "fold", values, outputs), opset_imports=self.opsets)
        return list(ReferenceEvaluator(one).run(None, feeds))

    # -- navigation --------------------------------------------------------------------------

    def const(self, name: str) -> Optional[np.ndarray]:
        return self.consts.get(name)

    def moves_values(self, node) -> bool:
        """Whether ``node`` only reshapes, retypes or reorders its first input (including
        picking the only entry of a leading axis of size 1)."""
        if node.op_type in _TRANSPARENT:
            return node.input[0] not in self.consts
        if node.op_type == "Gather" and _attr(node, "axis", 0) == 0:
            index = self.consts.get(node.input[1])
            return index is not None and index.size == 1 and int(index) == 0 and \
                self.shapes.get(node.input[0], (0,))[0] == 1
        return False

    def source(self, name: str) -> str:
        """Follow ``name`` back through ops that only move values around."""
        node = self.producer.get(name)
        while node is not None and self.moves_values(node):
            name = node.input[0]
            node = self.producer.get(name)
        return name

    def sink(self, name: str) -> str:
        """Follow ``name`` forward while its only use is an op that only moves values around."""
        users = self.consumers.get(name, [])
        while len(users) == 1 and self.moves_values(users[0]) and users[0].input[0] == name:
            name = users[0].output[0]
            users = self.consumers.get(name, [])
        return name

    def only_consumer(self, name: str, op_type: str):
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0].op_type == op_type else None

    def scalar(self, node) -> Optional[float]:
        """The constant scalar operand of a binary ``node`` (None if it has none)."""
        for name in node.input:
            value = self.consts.get(name)
            if value is not None and value.size == 1:
                return float(value.reshape(()))
        return None

    def other_input(self, node, name: str) -> str:
        return node.input[1] if node.input[0] == name else node.input[0]


def _attr(node, name: str, default=None):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _trailing_affine(g: _FoldedGraph, name: str, width: int, uses: set[str]) -> tuple[str, Optional[np.ndarray],
                                                                                     Optional[np.ndarray]]:
    """After a normalisation: an optional ``Mul`` by a per-channel constant, then an optional
    ``Add`` of one. Returns the tensor after them and the two constants (None when absent);
    the constants' names go to ``uses``."""
    scale = shift = None
    for op in ("Mul", "Add"):
        node = g.only_consumer(name, op)
        if node is None:
            continue
        other = g.other_input(node, name)
        value = g.const(other)
        if value is None or value.size != width:
            continue
        if op == "Mul":
            scale = value.reshape(width)
        else:
            shift = value.reshape(width)
        uses.add(other)
        name = node.output[0]
    return name, scale, shift


def _find_layers(g: _FoldedGraph) -> list[_Layer]:
    layers = []
    for order, node in enumerate(g.nodes):
        layer = (_as_conv(g, node) or _as_linear(g, node) or _as_layer_norm(g, node)
                 or _as_elementary_layer_norm(g, node) or _as_group_norm(g, node))
        if layer is not None:
            layer.order = order
            layers.append(layer)
    return layers


def _as_conv(g: _FoldedGraph, node) -> Optional[_Layer]:
    if node.op_type != "Conv" or g.const(node.input[1]) is None:
        return None
    weight = g.const(node.input[1])
    bias = g.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    attrs = {"group": _attr(node, "group", 1), "strides": list(_attr(node, "strides", [1])),
             "pads": list(_attr(node, "pads", [0, 0])), "dilations": list(_attr(node, "dilations", [1])),
             "auto_pad": _attr(node, "auto_pad", b"NOTSET")}
    params = {"weight": weight, **({"bias": bias} if bias is not None else {})}
    return _Layer("conv", g.source(node.input[0]), node.output[0], params, 0, attrs, set(node.input[1:]))


def _as_linear(g: _FoldedGraph, node) -> Optional[_Layer]:
    if node.op_type == "MatMul":
        matrix = g.const(node.input[1])
        if matrix is None or matrix.ndim != 2 or g.const(node.input[0]) is not None:
            return None
        weight, output, bias, uses = matrix.T, node.output[0], None, {node.input[1]}
        add = g.only_consumer(output, "Add")
        if add is not None:
            value = g.const(g.other_input(add, output))
            if value is not None and value.shape == (weight.shape[0],):
                bias, output = value, add.output[0]
                uses.add(g.other_input(add, node.output[0]))
    elif node.op_type == "Gemm":
        matrix = g.const(node.input[1])
        if matrix is None or _attr(node, "transA", 0):
            return None
        weight = (matrix if _attr(node, "transB", 0) else matrix.T) * _attr(node, "alpha", 1.0)
        bias = g.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if bias is not None:
            bias = np.broadcast_to(bias * _attr(node, "beta", 1.0), (weight.shape[0],))
        output, uses = node.output[0], set(node.input[1:])
    else:
        return None
    # The weight stays a transposed view: transposing 300 M values in numpy takes many seconds, and
    # matrix products read either layout at the same speed.
    params = {"weight": weight, **({"bias": bias} if bias is not None else {})}
    return _Layer("linear", g.source(node.input[0]), output, params, 0, uses=uses)


def _norm_layer(g: _FoldedGraph, kind: str, source: str, output: str, width: int, eps: float,
                scale: Optional[np.ndarray], shift: Optional[np.ndarray], uses: set[str]) -> _Layer:
    output, mul, add = _trailing_affine(g, output, width, uses)
    weight = np.ones(width, np.float32) if scale is None else scale.astype(np.float32)
    bias = np.zeros(width, np.float32) if shift is None else shift.astype(np.float32)
    if mul is not None:  # (x * w + b) * m + a
        weight, bias = weight * mul, bias * mul
    if add is not None:
        bias = bias + add
    return _Layer(kind, source, output, {"weight": weight, "bias": bias}, 0, {"eps": float(eps)}, uses)


def _as_layer_norm(g: _FoldedGraph, node) -> Optional[_Layer]:
    if node.op_type != "LayerNormalization":
        return None
    scale = g.const(node.input[1])
    if scale is None or scale.ndim != 1:
        return None
    rank = len(g.shapes.get(node.input[0], ()))
    if _attr(node, "axis", -1) not in (-1, rank - 1):
        raise _Unmappable(f"a layer norm over axis {_attr(node, 'axis')} (HuBERT normalises the last axis)")
    shift = g.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    return _norm_layer(g, "layer_norm", g.source(node.input[0]), node.output[0], scale.size,
                       _attr(node, "epsilon", 1e-5), scale, shift, set(node.input[1:]))


def _as_elementary_layer_norm(g: _FoldedGraph, node) -> Optional[_Layer]:
    """``(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)``, as opsets below 17 write it."""
    if node.op_type != "Div":
        return None
    centred, sub, sqrt = node.input[0], g.producer.get(node.input[0]), g.producer.get(node.input[1])
    if sub is None or sub.op_type != "Sub" or sqrt is None or sqrt.op_type != "Sqrt":
        return None
    mean = g.producer.get(sub.input[1])
    plus_eps = g.producer.get(sqrt.input[0])
    if mean is None or mean.op_type != "ReduceMean" or mean.input[0] != sub.input[0]:
        return None
    if plus_eps is None or plus_eps.op_type != "Add":
        return None
    variance = g.producer.get(next((n for n in plus_eps.input if n not in g.consts), ""))
    square = g.producer.get(variance.input[0]) if variance is not None and variance.op_type == "ReduceMean" else None
    eps = g.scalar(plus_eps)
    if square is None or eps is None or centred not in square.input:
        return None
    if not (square.op_type == "Pow" and g.scalar(square) == 2.0) and not (square.op_type == "Mul"
                                                                         and list(square.input) == [centred] * 2):
        return None
    width = g.shapes.get(node.output[0], (0,))[-1]
    return _norm_layer(g, "layer_norm", g.source(sub.input[0]), node.output[0], width, eps, None, None, set())


def _as_group_norm(g: _FoldedGraph, node) -> Optional[_Layer]:
    """``GroupNormalization``, or the ``InstanceNormalization`` between two reshapes that the
    TorchScript exporter writes for ``GroupNorm``; HuBERT has one group per channel."""
    if node.op_type == "GroupNormalization":
        groups = _attr(node, "num_groups")
        width = g.shapes.get(node.input[0], (0, 0))[1]
        scale, shift = g.const(node.input[1]), g.const(node.input[2])
        source, output = g.source(node.input[0]), node.output[0]
    elif node.op_type == "InstanceNormalization":
        reshape = g.producer.get(node.input[0])
        if reshape is None or reshape.op_type != "Reshape":
            return None
        source = g.source(reshape.input[0])
        width, groups = g.shapes.get(reshape.input[0], (0, 0))[1], g.shapes.get(node.input[0], (0, 0))[1]
        scale, shift = g.const(node.input[1]), g.const(node.input[2])
        back = g.only_consumer(node.output[0], "Reshape")
        output = back.output[0] if back is not None else node.output[0]
    else:
        return None
    if groups != width or scale is None or shift is None or scale.size != width:
        raise _Unmappable(f"a group norm of {groups} groups over {width} channels (HuBERT uses one per channel)")
    return _norm_layer(g, "group_norm", source, output, width, _attr(node, "epsilon", 1e-5), scale.reshape(-1),
                       shift.reshape(-1), set(node.input[1:]))


# -- attention --------------------------------------------------------------------------------


def _follow_to_product(g: _FoldedGraph, name: str) -> tuple[object, int, float]:
    """From a projection's output to the attention product it feeds: (MatMul, operand, scale).

    Only value-moving ops and multiplications / divisions by constant scalars may lie between.
    """
    scale = 1.0
    while True:
        users = g.consumers.get(name, [])
        if len(users) != 1:
            raise _Unmappable(f"an attention projection's output {name!r} is used by {len(users)} ops, expected 1")
        node = users[0]
        if g.moves_values(node) and node.input[0] == name:
            name = node.output[0]
        elif node.op_type in ("Mul", "Div") and g.scalar(node) is not None:
            value = g.scalar(node)
            if node.op_type == "Div" and node.input[1] != name:
                scale /= value
            elif node.op_type == "Div":
                raise _Unmappable("an attention projection divides a constant by its output")
            else:
                scale *= value
            name = node.output[0]
        elif node.op_type == "MatMul":
            return node, list(node.input).index(name), scale
        else:
            raise _Unmappable(f"an attention projection's output goes through {node.op_type} "
                              "(HuBERT only reshapes and scales it)")


def _scores_to_softmax(g: _FoldedGraph, scores) -> tuple[object, float]:
    """From the score product to its softmax: (Softmax, scale). Anything that is not a reshape
    or a constant scale (a mask, a bias, a clamp) is refused."""
    name, scale = scores.output[0], 1.0
    while True:
        users = g.consumers.get(name, [])
        node = users[0] if len(users) == 1 else None
        if node is None:
            raise _Unmappable("the attention scores feed several ops")
        if node.op_type == "Softmax":
            return node, scale
        if g.moves_values(node):
            name = node.output[0]
        elif node.op_type in ("Mul", "Div") and g.scalar(node) is not None and node.input[0] == name:
            scale = scale * g.scalar(node) if node.op_type == "Mul" else scale / g.scalar(node)
            name = node.output[0]
        else:
            raise _Unmappable(f"the attention scores pass through {node.op_type} before the softmax "
                              "(a mask or position bias: not a plain HuBERT attention)")


def _attention_roles(g: _FoldedGraph, projections: list[_Layer], layer: int) -> tuple[dict[str, _Layer], int]:
    """Which of three projections is query, key and value; and the head size."""
    ends = [(p, *_follow_to_product(g, p.output)) for p in projections]
    roles: dict[str, _Layer] = {}
    products: dict[str, object] = {}
    scales = []
    for projection, product, operand, scale in ends:
        softmax_of = g.producer.get(g.source(product.input[0])) if operand == 1 else None
        role = "v" if softmax_of is not None and softmax_of.op_type == "Softmax" else "qk"[operand]
        roles[role], products[role] = projection, product
        if role != "v":
            scales.append(scale)
    if sorted(roles) != ["k", "q", "v"] or products["q"] is not products["k"]:
        raise _Unmappable(f"transformer layer {layer}: cannot tell query, key and value apart")
    scores, context = products["q"], products["v"]
    head_dim = g.shapes.get(scores.input[0], (0,))[-1]
    if not head_dim:
        raise _Unmappable(f"transformer layer {layer}: the head size is not known from the graph")
    softmax, score_scale = _scores_to_softmax(g, scores)
    if g.source(context.input[0]) != softmax.output[0]:
        raise _Unmappable(f"transformer layer {layer}: the softmax does not weight the values directly")
    total = float(np.prod(scales)) * score_scale
    if not np.isclose(total, head_dim ** -0.5, rtol=1e-4):
        raise _Unmappable(f"transformer layer {layer}: attention scale {total:.6g}, expected 1/sqrt({head_dim})")
    return roles, head_dim


# -- the whole network ------------------------------------------------------------------------


def _count_gelus(g: _FoldedGraph) -> int:
    ops = [n.op_type for n in g.nodes]
    if "Tanh" in ops or any(n.op_type == "Gelu" and _attr(n, "approximate", b"none") != b"none" for n in g.nodes):
        raise _Unmappable("a tanh-approximated activation (HuBERT uses the exact GELU)")
    return ops.count("Erf") + ops.count("Gelu")


def _match(g: _FoldedGraph) -> tuple[HubertConfig, dict[str, np.ndarray]]:
    layers = _find_layers(g)
    linears = [x for x in layers if x.kind == "linear"]
    if not linears:
        raise _Unmappable("no linear layers (not a transformer)")
    first_linear = linears[0].order
    front = [x for x in layers if x.order < first_linear]
    convs = [x for x in front if x.kind == "conv"]
    pos = [x for x in layers if x.kind == "conv" and x.order > first_linear]
    if not convs or len(pos) != 1 or not front or front[-1].kind != "layer_norm":
        raise _Unmappable(f"{len(convs)} feature convolutions, {len(pos)} positional convolutions and no layer "
                          "norm before the projection; HuBERT has a conv stack, a norm, a projection and one "
                          "grouped positional conv")
    state: dict[str, np.ndarray] = {}
    claimed: set[str] = set()

    def put(prefix: str, layer: _Layer) -> None:
        for key, value in layer.params.items():
            state[f"{prefix}.{key}"] = value
        claimed.update(layer.uses)

    # conv feature extractor
    norms = [x for x in front[:-1] if x.kind != "conv"]
    channels, kernels, strides = [], [], []
    previous = 1
    for i, conv in enumerate(convs):
        w = conv.params["weight"]
        a = conv.attrs
        if (w.ndim != 3 or w.shape[1] != previous or a["group"] != 1 or any(a["pads"]) or a["dilations"] != [1]
                or a["auto_pad"] not in (b"NOTSET", "NOTSET")):
            raise _Unmappable(f"feature convolution {i} (weight {w.shape}, {a}) is not an unpadded 1-D conv "
                              f"over {previous} channels")
        channels.append(w.shape[0]), kernels.append(w.shape[2]), strides.append(a["strides"][0])
        previous = w.shape[0]
        put(f"feature_extractor.layers.{i}.conv", conv)
    if len({"bias" in c.params for c in convs}) != 1:
        raise _Unmappable("some feature convolutions have a bias and some do not")
    if g.source(convs[0].input) != g.input:
        raise _Unmappable("the input reaches the first convolution through other ops (HuBERT reads raw samples)")
    kinds = [x.kind for x in norms]
    if kinds == ["layer_norm"] * len(convs):
        extractor_norm = "layer"
    elif kinds == ["group_norm"]:
        extractor_norm = "group"
    else:
        raise _Unmappable(f"the conv stack is normalised by {kinds or 'nothing'}; HuBERT has a layer norm after "
                          "every conv or a group norm after the first")
    for i, norm in enumerate(norms):
        if g.source(norm.input) != convs[i].output:
            raise _Unmappable(f"the norm of conv layer {i} does not read that conv's output")
        put(f"feature_extractor.layers.{i}.norm", norm)
    put("feature_projection.norm", front[-1])
    projection = linears[0]
    hidden = projection.params["weight"].shape[0]
    if projection.params["weight"].shape[1] != previous or front[-1].params["weight"].size != previous:
        raise _Unmappable("the feature projection does not read the conv stack's channels")
    put("feature_projection.linear", projection)

    # positional convolution
    pos_conv = pos[0]
    w = pos_conv.params["weight"]
    kernel, groups = w.shape[2], pos_conv.attrs["group"]
    if w.shape[:2] != (hidden, hidden // groups) or pos_conv.attrs["pads"] != [kernel // 2] * 2:
        raise _Unmappable(f"the positional conv (weight {w.shape}, {pos_conv.attrs}) is not a same-size grouped "
                          f"conv over {hidden} channels")
    if g.source(pos_conv.input) != projection.output:
        raise _Unmappable("the positional conv does not read the projected features")
    put("encoder.pos_conv.conv", pos_conv)

    # transformer
    body = [x for x in layers if x.order > first_linear and x is not pos_conv]
    tokens = "".join("L" if x.kind == "linear" else "N" if x.kind == "layer_norm" else "?" for x in body)
    num_layers = (len(linears) - 1) // 6
    if num_layers < 1 or tokens != "NLLLLNLL" * num_layers + "N":
        raise _Unmappable(f"the transformer's layers are not HuBERT's: {len(linears) - 1} linear layers and "
                          f"{tokens.count('N')} norms in the order {tokens[:40]}")
    body_norms = [x for x in body if x.kind == "layer_norm"]
    body_linears = linears[1:]
    first_norm = body_norms[0]
    out_proj = body_linears[3]
    attended = g.sink(out_proj.output)
    residual = g.only_consumer(attended, "Add")
    if residual is None:
        raise _Unmappable("the attention output is not added to a residual")
    added = g.source(g.other_input(residual, attended))
    if added == first_norm.input:
        pre_norm = True
    elif added == first_norm.output:
        pre_norm = False
    else:
        raise _Unmappable("the first residual sum adds neither the input nor the output of the first norm")
    head_dims = set()
    for i in range(num_layers):
        lin = body_linears[6 * i : 6 * i + 6]
        roles, head_dim = _attention_roles(g, lin[:3], i)
        head_dims.add(head_dim)
        for role, projection_layer in roles.items():
            put(f"encoder.layers.{i}.attention.{role}_proj", projection_layer)
        put(f"encoder.layers.{i}.attention.out_proj", lin[3])
        put(f"encoder.layers.{i}.feed_forward.fc1", lin[4])
        put(f"encoder.layers.{i}.feed_forward.fc2", lin[5])
        first = 2 * i + (0 if pre_norm else 1)
        put(f"encoder.layers.{i}.attention_norm", body_norms[first])
        put(f"encoder.layers.{i}.ffn_norm", body_norms[first + 1])
    put("encoder.norm", body_norms[-1] if pre_norm else body_norms[0])
    if len(head_dims) != 1:
        raise _Unmappable(f"the layers use different head sizes {sorted(head_dims)}")
    if g.source(g.output) != body_norms[-1].output:
        raise _Unmappable("the output is not the last layer norm's (HuBERT returns the last hidden state)")

    softmaxes = sum(n.op_type == "Softmax" for n in g.nodes)
    gelus = _count_gelus(g)
    if softmaxes != num_layers or gelus != len(convs) + 1 + num_layers:
        raise _Unmappable(f"{softmaxes} softmaxes and {gelus} GELUs for {num_layers} layers and {len(convs)} "
                          f"convs (HuBERT has one softmax per layer and one GELU per conv, layer and the positions)")
    epsilons = {x.attrs["eps"] for x in layers if "eps" in x.attrs}
    if len(epsilons) != 1:
        raise _Unmappable(f"the norms use different epsilons {sorted(epsilons)}")
    for node in g.nodes:
        for name in node.input:
            value = g.consts.get(name)
            if value is not None and value.size > 1 and value.dtype in _FLOAT_TYPES and name not in claimed:
                raise _Unmappable(f"a weight {name!r} of shape {value.shape} used by a {node.op_type} is not "
                                  "part of HuBERT")
    ffn = body_linears[4].params["weight"].shape[0]
    config = HubertConfig(
        hidden_size=hidden, num_layers=num_layers, num_heads=hidden // head_dims.pop(), ffn_size=ffn,
        conv_channels=tuple(channels), conv_kernels=tuple(kernels), conv_strides=tuple(strides),
        conv_bias="bias" in convs[0].params, extractor_norm=extractor_norm, pre_norm=pre_norm,
        pos_conv_kernel=kernel, pos_conv_groups=groups, layer_norm_eps=epsilons.pop(),
    )
    return config, state


# -- public API -------------------------------------------------------------------------------


def _load_proto(path: Path):
    import onnx

    try:
        return onnx.load(str(path), load_external_data=True)
    except Exception as err:  # protobuf / onnx raise untyped errors for damaged files
        raise CheckpointError(f"cannot read {str(path)!r} as an ONNX model ({err}); the file is damaged") from err


def read_hubert_onnx(path: Union[str, os.PathLike]) -> tuple[HubertConfig, dict[str, torch.Tensor]]:
    """The configuration and the :class:`~.hubert.Hubert` state dict of a HuBERT ONNX file.

    Raises:
        CheckpointError: the file is not a HuBERT this module reproduces; the message says
            which part of the graph differs.
    """
    path = Path(path)
    model = _load_proto(path)
    graph = model.graph
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise CheckpointError(f"{str(path)!r} cannot be read as a HuBERT: it has {len(graph.input)} inputs and "
                              f"{len(graph.output)} outputs, expected one of each")
    import onnx

    tensor_type = graph.input[0].type.tensor_type
    dims = tensor_type.shape.dim
    if tensor_type.elem_type != onnx.TensorProto.FLOAT or len(dims) != 2:
        raise CheckpointError(f"{str(path)!r} cannot be read as a HuBERT: its input should be float32 samples "
                              f"of shape (1, samples), it is {onnx.helper.printable_type(graph.input[0].type)}")
    fixed = dims[1].dim_value if dims[1].HasField("dim_value") else None
    try:
        folded = _FoldedGraph(model, fixed or DEFAULT_PROBE_SAMPLES)
        del model, graph
        config, arrays = _match(folded)
    except _Unmappable as err:
        raise CheckpointError(f"{str(path)!r} cannot be read as a HuBERT: {err}") from None
    del folded
    # Arrays read from the file are read-only views of its bytes. Copying 1.26 GB would cost
    # seconds; the module only ever reads its weights (and moving it to a GPU or another dtype
    # copies them anyway), so the tensors share the arrays' memory.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        state = {key: torch.from_numpy(value if value.dtype == np.float32 else value.astype(np.float32))
                 for key, value in arrays.items()}
    return config, state


def load_hubert_onnx(
    path: Union[str, os.PathLike], device: Union[str, torch.device] = "cpu", dtype: torch.dtype = torch.float32
) -> Hubert:
    """A :class:`~.hubert.Hubert` in eval mode holding the weights of the ONNX file at ``path``."""
    config, state = read_hubert_onnx(path)
    return build_hubert(config, state, path, device, dtype)


def build_hubert(
    config: HubertConfig, state: dict[str, torch.Tensor], path: Union[str, os.PathLike],
    device: Union[str, torch.device] = "cpu", dtype: torch.dtype = torch.float32,
) -> Hubert:
    """The module of ``config`` holding ``state`` (mapped from the file at ``path``), in eval mode."""
    with torch.device("meta"):
        model = Hubert(config)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    absent_bias = [k for k in missing if k.endswith(".bias")]
    if unexpected or set(missing) - set(absent_bias):
        raise CheckpointError(f"{str(path)!r}: mapped weights do not fit HuBERT (missing {missing}, "
                              f"unexpected {unexpected})")
    for key in absent_bias:  # a linear layer exported without its bias adds zero
        module_name, _ = key.rsplit(".", 1)
        module = model.get_submodule(module_name)
        module.bias = torch.nn.Parameter(torch.zeros(module.weight.shape[0]))
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)
