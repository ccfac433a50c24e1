"""HuBERT in PyTorch: weights read from ONNX graphs by structure, parity with onnxruntime.

Small HuBERTs (2 layers, 64 wide) with distinct random weights are exported here by each
exporter and in each style the official file might have been written in; the mapping must
recover the configuration and reproduce onnxruntime's output on the same file.
"""
from __future__ import annotations

import gc
import logging
import os
import weakref

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import helper, numpy_helper
from torch import Tensor

from ditto_core.audio import HubertFeatureExtractor
from ditto_core.audio import hubert as hubert_module
from ditto_core.audio.hubert_stub import write_stub_hubert
from ditto_core.errors import CheckpointError, InputError
from ditto_core.models.hubert import HubertConfig, SelfAttention
from ditto_core.models.hubert_onnx_export import export_hubert_onnx, random_hubert
from ditto_core.models.hubert_onnx_weights import load_hubert_onnx, read_hubert_onnx
from tests.parity import rel_l2

SMALL = HubertConfig(hidden_size=64, num_layers=2, num_heads=4, ffn_size=128, conv_channels=(32,) * 7,
                     pos_conv_kernel=16, pos_conv_groups=4)
# HuBERT-base's layout: group norm on the first conv only, no conv bias, post-norm transformer.
SMALL_BASE = HubertConfig(hidden_size=64, num_layers=2, num_heads=2, ffn_size=96, conv_channels=(24,) * 7,
                          conv_bias=False, extractor_norm="group", pre_norm=False, pos_conv_kernel=8,
                          pos_conv_groups=2)
WINDOW = 6480


def _anonymise(path, out):
    """Every initializer and node renamed to a meaningless one, as some exporters write them."""
    model = onnx.load(str(path))
    renames = {init.name: f"t{i}" for i, init in enumerate(model.graph.initializer)}
    for init in model.graph.initializer:
        init.name = renames[init.name]
    for i, node in enumerate(model.graph.node):
        node.name = f"n{i}"
        for k, name in enumerate(node.input):
            node.input[k] = renames.get(name, name)
    onnx.save(model, str(out))
    return out


def _optimised(path, out):
    """onnxscript's optimiser (constant folding, op fusion) applied to an export."""
    optimizer = pytest.importorskip("onnxscript.optimizer")
    onnx.save(optimizer.optimize(onnx.load(str(path))), str(out))
    return out


def _as_gemm(path, out):
    """Every ``MatMul`` + bias ``Add`` of a fixed-length export rewritten as ``Gemm(transB=1)``
    between two reshapes: the form of exports that flatten the batch before linear layers."""
    model = onnx.load(str(path))
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inferred.graph.value_info}
    inits = {i.name: i for i in model.graph.initializer}
    users = {}
    for node in model.graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    nodes, skip = [], set()
    for node in model.graph.node:
        if id(node) in skip:
            continue
        add = users.get(node.output[0], [None])[0]
        if node.op_type != "MatMul" or node.input[1] not in inits or add is None or add.op_type != "Add":
            nodes.append(node)
            continue
        weight = numpy_helper.to_array(inits[node.input[1]])
        bias = next(n for n in add.input if n != node.output[0])
        shape = shapes[node.input[0]]
        tag = node.output[0].replace("/", "_")
        model.graph.initializer.extend([
            numpy_helper.from_array(np.ascontiguousarray(weight.T), f"{tag}_wt"),
            numpy_helper.from_array(np.array([-1, weight.shape[0]], np.int64), f"{tag}_flat"),
            numpy_helper.from_array(np.array([*shape[:-1], weight.shape[1]], np.int64), f"{tag}_back"),
        ])
        nodes += [helper.make_node("Reshape", [node.input[0], f"{tag}_flat"], [f"{tag}_2d"]),
                  helper.make_node("Gemm", [f"{tag}_2d", f"{tag}_wt", bias], [f"{tag}_y"], transB=1),
                  helper.make_node("Reshape", [f"{tag}_y", f"{tag}_back"], [add.output[0]])]
        skip.add(id(add))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(out))
    return out


class _EagerAttention(SelfAttention):
    """Attention written out as transformers' HuBERT writes it (the likely source of the official
    export): the query pre-scaled, heads folded into the batch axis, two batched products."""

    def forward(self, x: Tensor) -> Tensor:
        batch, time, width = x.shape
        heads, size = self.num_heads, width // self.num_heads

        def fold(t: Tensor) -> Tensor:
            return t.view(batch, time, heads, size).transpose(1, 2).reshape(batch * heads, time, size)

        q, k, v = fold(self.q_proj(x) * size ** -0.5), fold(self.k_proj(x)), fold(self.v_proj(x))
        probs = torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1)
        context = torch.bmm(probs, v).view(batch, heads, time, size).transpose(1, 2).reshape(batch, time, width)
        return self.out_proj(context)


def _eager(model):
    for layer in model.encoder.layers:
        layer.attention.__class__ = _EagerAttention
    return model


VARIANTS = {
    # name: (config, export options, module rewrite before export, file post-processing)
    "torchscript": (SMALL, {}, None, None),
    "torchscript_unfolded": (SMALL, {"constant_folding": False}, None, None),
    "torchscript_fixed_length": (SMALL, {"num_samples": WINDOW}, None, None),
    "torchscript_opset14": (SMALL, {"opset": 14}, None, None),  # layer norms as elementary ops
    "torchscript_no_weight_norm": (SMALL, {"weight_norm": False}, None, None),
    "transformers_attention_opset11": (SMALL, {"opset": 11}, _eager, None),
    "transformers_attention_unfolded_fixed": (SMALL, {"constant_folding": False, "num_samples": WINDOW}, _eager,
                                              None),
    "anonymous": (SMALL, {}, None, _anonymise),
    "anonymous_unfolded_fixed": (SMALL, {"constant_folding": False, "num_samples": WINDOW}, None, _anonymise),
    "onnxscript_optimised": (SMALL, {"constant_folding": False}, None, _optimised),
    "gemm": (SMALL, {"num_samples": WINDOW}, None, _as_gemm),
    "base_layout": (SMALL_BASE, {}, None, None),
    "base_layout_opset14_fixed": (SMALL_BASE, {"opset": 14, "num_samples": WINDOW}, None, None),
}
# The dynamo exporter takes 10-30 s per small graph on two cores.
DYNAMO_VARIANTS = {
    "dynamo": (SMALL, {"dynamo": True, "opset": 18}, None, None),
    "dynamo_fixed_length": (SMALL, {"dynamo": True, "opset": 18, "num_samples": WINDOW}, None, None),
}


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hubert_exports")


def _export(export_dir, name, variants):
    path = export_dir / f"{name}.onnx"
    if not path.exists():
        config, options, rewrite, post = variants[name]
        model = random_hubert(config, seed=3)
        raw = export_hubert_onnx(rewrite(model) if rewrite else model, export_dir / f"{name}.raw.onnx", **options)
        if post is None:
            raw.rename(path)
        else:
            post(raw, path)
    return path


def _windows(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return 0.1 * torch.randn(n, WINDOW, generator=g)


def _onnxruntime_rows(path, windows):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rows = [session.run(None, {"input_values": w[None].numpy()})[0] for w in windows]
    return torch.from_numpy(np.stack(rows))


def _check_variant(path, config):
    got_config, state = read_hubert_onnx(path)
    assert got_config == HubertConfig(**{**config.__dict__, "layer_norm_eps": got_config.layer_norm_eps})
    assert got_config.layer_norm_eps == pytest.approx(config.layer_norm_eps, rel=1e-6)
    model = load_hubert_onnx(path)
    windows = _windows(3)
    assert rel_l2(model(windows), _onnxruntime_rows(path, windows)) < 1e-5


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_mapping_matches_onnxruntime(export_dir, name):
    _check_variant(_export(export_dir, name, VARIANTS), VARIANTS[name][0])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DYNAMO_VARIANTS))
def test_mapping_of_dynamo_exports(export_dir, name):
    pytest.importorskip("onnxscript")
    _check_variant(_export(export_dir, name, DYNAMO_VARIANTS), DYNAMO_VARIANTS[name][0])


def test_names_play_no_part(export_dir):
    """The anonymous file maps to the same tensors as the one that keeps PyTorch's names."""
    _, named = read_hubert_onnx(_export(export_dir, "torchscript", VARIANTS))
    _, anonymous = read_hubert_onnx(_export(export_dir, "anonymous", VARIANTS))
    assert named.keys() == anonymous.keys()
    assert all(torch.equal(named[k], anonymous[k]) for k in named)
    source = random_hubert(SMALL, seed=3).state_dict()
    source_keys = {k.replace("parametrizations.weight.original0", "weight") for k in source}
    assert set(named) == source_keys
    for key in ("encoder.layers.1.attention.k_proj.weight", "feature_extractor.layers.3.norm.weight"):
        assert torch.equal(named[key], source[key])


# ------------------------------------------------------------------------------ refusals


def _tamper(path, out, edit):
    model = onnx.load(str(path))
    edit(model.graph)
    onnx.save(model, str(out))
    return out


def _mask_scores(graph):
    """Add a constant mask to the first layer's attention scores (a streaming-style variant)."""
    softmax = next(n for n in graph.node if n.op_type == "Softmax")
    graph.initializer.append(numpy_helper.from_array(np.zeros((1, 1, 20, 20), np.float32), "mask"))
    graph.node.insert(list(graph.node).index(softmax),
                      helper.make_node("Add", [softmax.input[0], "mask"], ["masked_scores"]))
    softmax.input[0] = "masked_scores"


def _tanh_gelu(graph):
    erf = next(n for n in graph.node if n.op_type == "Erf")
    erf.op_type = "Tanh"


def _extra_weight(graph):
    """Scale the output by a learnt per-channel vector HuBERT does not have."""
    graph.initializer.append(numpy_helper.from_array(np.full(64, 2.0, np.float32), "extra"))
    final = next(n for n in graph.node if graph.output[0].name in n.output)
    final.output[0] = "before_extra"
    graph.node.append(helper.make_node("Mul", ["before_extra", "extra"], [graph.output[0].name]))


@pytest.mark.parametrize("edit, message", [
    (_mask_scores, "attention scores pass through Add"),
    (_tanh_gelu, "tanh-approximated"),
    (_extra_weight, "not the last layer norm"),
])
def test_graphs_that_differ_are_refused(export_dir, tmp_path, edit, message):
    path = _tamper(_export(export_dir, "torchscript_fixed_length", VARIANTS), tmp_path / "tampered.onnx", edit)
    with pytest.raises(CheckpointError, match=message) as err:
        read_hubert_onnx(path)
    assert "tampered.onnx" in str(err.value)


def test_stub_and_damaged_files_are_refused(tmp_path):
    stub = write_stub_hubert(tmp_path / "stub.onnx")
    with pytest.raises(CheckpointError, match=r"stub.onnx' cannot be read as a HuBERT: no linear layers"):
        read_hubert_onnx(stub)
    image = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "image",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])])
    onnx.save(helper.make_model(image, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "image.onnx"))
    with pytest.raises(CheckpointError, match=r"image.onnx' .* input should be float32 samples .* 1x3x8x8"):
        read_hubert_onnx(tmp_path / "image.onnx")
    damaged = tmp_path / "damaged.onnx"
    damaged.write_bytes(b"\x08\x07garbage" * 64)
    with pytest.raises(CheckpointError, match="damaged.onnx"):
        read_hubert_onnx(damaged)


# ------------------------------------------------------------------------------ the extractor


# The extractor wants Ditto's 1024-wide rows: one layer of the official width, a thin conv stack.
WIDE = HubertConfig(hidden_size=1024, num_layers=1, num_heads=16, ffn_size=64, conv_channels=(16,) * 7,
                    pos_conv_kernel=4, pos_conv_groups=16)


@pytest.fixture(scope="module")
def wide_path(tmp_path_factory):
    return export_hubert_onnx(random_hubert(WIDE, seed=1), tmp_path_factory.mktemp("wide") / "wide.onnx")


def _speech(seconds, seed=0):
    g = torch.Generator().manual_seed(seed)
    return 0.1 * torch.randn(round(seconds * 16000), generator=g)


def test_torch_backend_matches_onnxruntime(wide_path):
    speech = _speech(3.37)
    on_torch = HubertFeatureExtractor(wide_path, backend="torch")
    on_ort = HubertFeatureExtractor(wide_path, backend="onnxruntime")
    assert (on_torch.backend, on_torch.precision, on_ort.backend) == ("torch", "fp32", "onnxruntime")
    got, ref = on_torch(speech), on_ort(speech)
    assert got.features.shape == ref.features.shape == (85, 1024)
    assert got.features.dtype == torch.float32
    assert rel_l2(got.features, ref.features) < 1e-4


def test_batched_windows_equal_window_by_window(wide_path):
    speech = _speech(1.3, seed=2)  # 7 windows: a full group of 4 and a partial one
    batched = HubertFeatureExtractor(wide_path, backend="torch", max_batch_windows=4)(speech).features
    single = HubertFeatureExtractor(wide_path, backend="torch", max_batch_windows=1)(speech).features
    assert rel_l2(batched, single) < 1e-6


def test_long_clip_runs_in_bounded_batches(wide_path, monkeypatch):
    extractor = HubertFeatureExtractor(wide_path, backend="torch", max_batch_windows=7)
    sizes = []

    def spy(windows):  # only the grouping is under test: stand in for the network
        sizes.append(tuple(windows.shape))
        return torch.zeros(windows.shape[0], 20, 1024)

    monkeypatch.setattr(extractor, "_runner", spy)
    progress = []
    got = extractor(_speech(60.0), progress=lambda done, total: progress.append((done, total)))
    assert got.features.shape == (1500, 1024)
    assert sum(n for n, _ in sizes) == 300 and max(n for n, _ in sizes) == 7
    assert {s for _, s in sizes} == {WINDOW}
    assert progress[0] == (7, 300) and progress[-1] == (300, 300) and len(progress) == 43


def test_unmappable_file_falls_back_to_onnxruntime(tmp_path, monkeypatch, caplog):
    stub = write_stub_hubert(tmp_path / "stub.onnx")
    with pytest.raises(CheckpointError, match="no linear layers"):
        HubertFeatureExtractor(stub, backend="torch")
    monkeypatch.setattr(hubert_module, "AUTO_BACKEND_ON_CPU", "torch")
    with caplog.at_level(logging.INFO, logger="ditto_core.audio"):
        first = HubertFeatureExtractor(stub)
        second = HubertFeatureExtractor(stub)
    assert first.backend == second.backend == "onnxruntime" and first.model is None
    fallbacks = [r for r in caplog.records if "runs on onnxruntime" in r.message and "stub.onnx" in r.message]
    assert len(fallbacks) == 1 and fallbacks[0].levelno == logging.INFO  # said once, quietly
    assert first(_speech(0.5)).features.shape == (13, 1024)


def test_backend_and_precision_are_validated(wide_path):
    with pytest.raises(InputError, match="backend 'tensorrt' is unknown"):
        HubertFeatureExtractor(wide_path, backend="tensorrt")
    with pytest.raises(InputError, match="precision 'fp8' is unknown"):
        HubertFeatureExtractor(wide_path, backend="torch", precision="fp8")
    with pytest.raises(InputError, match="needs backend 'torch'"):
        HubertFeatureExtractor(wide_path, backend="onnxruntime", precision="fp16")
    with pytest.raises(InputError, match="max_batch_windows"):
        HubertFeatureExtractor(wide_path, backend="torch", max_batch_windows=0)
    assert HubertFeatureExtractor(wide_path).backend == hubert_module.AUTO_BACKEND_ON_CPU


def test_bf16_on_the_cpu_is_close(wide_path):
    speech = _speech(1.0)
    fp32 = HubertFeatureExtractor(wide_path, backend="torch")(speech).features
    bf16 = HubertFeatureExtractor(wide_path, backend="torch", precision="bf16")(speech).features
    assert bf16.dtype == torch.float32
    assert 0 < rel_l2(bf16, fp32) < 3e-2


def test_fp16_overflow_switches_to_fp32(wide_path, caplog):
    extractor = HubertFeatureExtractor(wide_path, backend="torch", precision="fp16")
    with torch.no_grad():  # activations beyond fp16's range (65504) in the feed-forward
        extractor.model.encoder.layers[0].feed_forward.fc1.weight.mul_(1e5)
    with caplog.at_level(logging.WARNING, logger="ditto_core.audio"):
        got = extractor(_speech(0.5)).features
    assert "overflowed in fp16" in caplog.text
    assert extractor.precision == "fp32" and bool(torch.isfinite(got).all())


def test_dropping_the_extractor_frees_the_weights(wide_path):
    extractor = HubertFeatureExtractor(wide_path, backend="torch")
    extractor(_speech(0.5))
    weights = weakref.ref(extractor.model.encoder.layers[0].feed_forward.fc1.weight)
    del extractor
    gc.collect()
    assert weights() is None


def test_live_streams_share_the_pipelines_torch_hubert(wide_path, tmp_path):
    """One copy of HuBERT's weights serves offline clips and every live stream; an onnxruntime
    extractor (whose session binds its own buffers) gets a second session from the same file."""
    from ditto_core.live import LiveRuntime
    from tests.live_support import RecordingRenderer, light_pipeline

    pipeline = light_pipeline(tmp_path)
    pipeline.hubert = HubertFeatureExtractor(wide_path, backend="torch")
    runtime = LiveRuntime(pipeline, max_streams=1, renderer=RecordingRenderer())
    try:
        assert runtime.hubert is pipeline.hubert
        window = _speech(WINDOW / 16000, seed=4)
        alone = HubertFeatureExtractor(wide_path, backend="torch").encode_window(window)
        assert rel_l2(runtime.hubert.encode_window(window), alone) < 1e-6
    finally:
        runtime.shutdown()

    (tmp_path / "onnx").mkdir()
    onnx_pipeline = light_pipeline(tmp_path / "onnx")
    runtime = LiveRuntime(onnx_pipeline, max_streams=1, renderer=RecordingRenderer())
    try:
        assert runtime.hubert is not onnx_pipeline.hubert and runtime.hubert.backend == "onnxruntime"
        assert runtime.hubert.model_path == onnx_pipeline.hubert.model_path
    finally:
        runtime.shutdown()


# ------------------------------------------------------------------------------ full width, benchmark file


@pytest.mark.slow
def test_full_width_layers_map(tmp_path):
    """Two layers of HuBERT-large's exact shapes (512-channel convs, 1024 wide, 16 heads, FFN 4096,
    positional conv 128 x 16 groups), through the extractor on both backends."""
    config = HubertConfig(num_layers=2)
    path = export_hubert_onnx(random_hubert(config, seed=5), tmp_path / "full_width.onnx")
    got, _ = read_hubert_onnx(path)
    assert got == HubertConfig(num_layers=2, layer_norm_eps=got.layer_norm_eps)
    speech = _speech(0.6)
    features = HubertFeatureExtractor(path, backend="torch")(speech).features
    reference = HubertFeatureExtractor(path, backend="onnxruntime")(speech).features
    assert rel_l2(features, reference) < 1e-4


def test_benchmark_model_is_written_once(tmp_path):
    from bench.make_hubert_large import make_hubert_large

    out = tmp_path / "hubert.onnx"
    assert make_hubert_large(out, seed=1, config=SMALL) == out
    _check_variant(out, SMALL)
    written = out.stat().st_mtime_ns
    make_hubert_large(out, seed=1, config=SMALL)
    assert out.stat().st_mtime_ns == written  # digest matched: kept
    out.write_bytes(out.read_bytes()[:-8])  # damaged: rewritten
    make_hubert_large(out, seed=1, config=SMALL)
    assert out.stat().st_mtime_ns != written and read_hubert_onnx(out)[0].num_layers == SMALL.num_layers
    make_hubert_large(out, seed=2, config=SMALL)  # another recipe: rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hubert.onnx", "hubert.onnx.json"]


# ------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("precision, limit", [("fp32", 1e-4), ("fp16", 5e-3), ("bf16", 3e-2)])
def test_cuda_precisions(wide_path, precision, limit):
    """CUDA against onnxruntime on the CPU (fp32); fp16/bf16 errors printed for the record."""
    speech = _speech(4.0)
    ref = HubertFeatureExtractor(wide_path, backend="onnxruntime")(speech).features
    on_gpu = HubertFeatureExtractor(wide_path, device="cuda", backend="torch", precision=precision)
    got = on_gpu(speech.cuda()).features
    assert got.device.type == "cuda" and got.dtype == torch.float32
    error = rel_l2(got, ref)
    print(f"HuBERT {precision} on CUDA vs onnxruntime fp32: rel-L2 {error:.2e}")
    assert error < limit


@pytest.mark.gpu
def test_cuda_auto_backend_is_torch_fp16(wide_path):
    extractor = HubertFeatureExtractor(wide_path, device="cuda")
    assert (extractor.backend, extractor.precision) == ("torch", "fp16")
    assert next(extractor.model.parameters()).device.type == "cuda"


# ------------------------------------------------------------------ mapped-weight cache


def test_mapped_weights_are_kept_for_the_next_process_and_remapped_when_the_file_changes(tmp_path, monkeypatch,
                                                                                         caplog):
    from ditto_core.models import hubert_weight_cache

    onnx_path = export_hubert_onnx(random_hubert(SMALL, seed=4), tmp_path / "hubert.onnx")
    cache = tmp_path / "cache"
    config, state = hubert_weight_cache.cached_hubert_weights(onnx_path, cache)
    (entry,) = cache.glob("*.safetensors")
    mapped = []
    monkeypatch.setattr(hubert_weight_cache, "read_hubert_onnx",
                        lambda path: mapped.append(path) or read_hubert_onnx(path))
    again_config, again = hubert_weight_cache.cached_hubert_weights(onnx_path, cache)
    assert not mapped and again_config == config  # read from the entry, not from the graph
    assert again.keys() == state.keys() and all(torch.equal(again[k], state[k]) for k in state)
    model = hubert_weight_cache.load_cached_hubert(onnx_path, cache_dir=cache)
    assert not mapped and model.config == config
    # Another file under the same name (a new download): mapped again, the entry replaced.
    export_hubert_onnx(random_hubert(SMALL, seed=5), onnx_path)
    _, other = hubert_weight_cache.cached_hubert_weights(onnx_path, cache)
    assert len(mapped) == 1 and not all(torch.equal(other[k], state[k]) for k in state)
    assert list(cache.glob("*.safetensors")) == [entry]  # replaced, not piled up
    # A damaged entry is mapped again, with a warning, and rewritten.
    entry.write_bytes(b"not a safetensors file")
    with caplog.at_level(logging.WARNING):
        _, repaired = hubert_weight_cache.cached_hubert_weights(onnx_path, cache)
    assert len(mapped) == 2 and "unreadable" in caplog.text
    assert all(torch.equal(repaired[k], other[k]) for k in other)
    hubert_weight_cache.cached_hubert_weights(onnx_path, cache)
    assert len(mapped) == 2  # the rewritten entry serves again


def test_the_weight_cache_can_be_written_while_the_process_goes_on(tmp_path, caplog):
    from ditto_core.models import hubert_weight_cache
    from ditto_core.process_exit import wait_for_background

    onnx_path = export_hubert_onnx(random_hubert(SMALL, seed=4), tmp_path / "hubert.onnx")
    cache = tmp_path / "cache"
    config, state = hubert_weight_cache.cached_hubert_weights(onnx_path, cache, write_in_background=True)
    assert config == read_hubert_onnx(onnx_path)[0]
    assert wait_for_background(timeout=60)
    again_config, again = hubert_weight_cache.cached_hubert_weights(onnx_path, cache)
    assert again_config == config and all(torch.equal(again[k], state[k]) for k in state)
    assert [p.name for p in cache.iterdir()] == [next(cache.glob("*.safetensors")).name]  # no temporaries left
    # A background write that fails is a warning, as in the foreground.
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the cache folder would go")
    with caplog.at_level(logging.WARNING):
        hubert_weight_cache.cached_hubert_weights(onnx_path, blocked, write_in_background=True)
        assert wait_for_background(timeout=60)
    assert "could not keep the mapped HuBERT weights" in caplog.text


def test_an_unwritable_weight_cache_only_costs_the_mapping(tmp_path, caplog):
    from ditto_core.models import hubert_weight_cache

    onnx_path = export_hubert_onnx(random_hubert(SMALL, seed=4), tmp_path / "hubert.onnx")
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the cache folder would go")
    with caplog.at_level(logging.WARNING):
        config, state = hubert_weight_cache.cached_hubert_weights(onnx_path, blocked)
    assert config == read_hubert_onnx(onnx_path)[0] and state
    assert "could not keep the mapped HuBERT weights" in caplog.text


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="user ids are POSIX")
def test_no_trusted_user_cache_maps_the_weights_each_time(tmp_path, monkeypatch, caplog):
    from ditto_core.models import hubert_weight_cache

    onnx_path = export_hubert_onnx(random_hubert(SMALL, seed=4), tmp_path / "hubert.onnx")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "comfyui-ditto").mkdir(parents=True, mode=0o700)
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)  # the folder is now another user's
    with caplog.at_level(logging.WARNING):
        config, state = hubert_weight_cache.cached_hubert_weights(onnx_path)
    assert config == read_hubert_onnx(onnx_path)[0] and state
    assert "not cached" in caplog.text and "another user" in caplog.text
    assert list((tmp_path / "xdg" / "comfyui-ditto").iterdir()) == []
