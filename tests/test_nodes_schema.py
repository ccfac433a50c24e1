"""The node pack without ComfyUI: import, schemas, paths, model registry, progress plumbing."""
from __future__ import annotations

import asyncio
import contextlib
import math
import subprocess
import sys

import pytest
import torch

from tests.comfy_stubs import REPO, load_pack
from tests.recording_turns import recording_elsewhere, started_and_waiting

pack = load_pack()

import comfy.model_management  # noqa: E402  (stand-ins are importable once the pack is loaded)
import comfy.utils  # noqa: E402
import folder_paths  # noqa: E402
from comfyui_ditto_pack.nodes.model_registry import ModelHandle, ModelRegistry  # noqa: E402
from comfyui_ditto_pack.nodes.paths import (  # noqa: E402
    model_folder_choices, register_model_folder, resolve_model_folder, safe_filename_prefix,
)
from comfyui_ditto_pack.nodes.runtime import comfy_progress, staged_progress, timed_stage  # noqa: E402

NODES = asyncio.run(asyncio.run(pack.comfy_entrypoint()).get_node_list())
SCHEMAS = {node.GET_SCHEMA().node_id: node.GET_SCHEMA() for node in NODES}
WIDGETS = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}


def test_pack_imports_without_comfyui_and_exposes_the_v3_entrypoint():
    # A fresh interpreter with no stand-ins on the path: importing must not touch ComfyUI.
    code = (
        "import importlib.util, sys, inspect\n"
        f"spec = importlib.util.spec_from_file_location('pack', {str(REPO / '__init__.py')!r}, "
        f"submodule_search_locations=[{str(REPO)!r}])\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['pack'] = m; spec.loader.exec_module(m)\n"
        "assert inspect.iscoroutinefunction(m.comfy_entrypoint)\n"
        "assert m.WEB_DIRECTORY == './web'\n"
        "assert not [k for k in sys.modules if k.split('.')[0] in ('comfy', 'comfy_api', 'folder_paths', 'torch')]\n"
        "assert sys.path.index(" + repr(str(REPO)) + ") > 0  # appended: never shadows ComfyUI's `nodes`\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_entrypoint_returns_an_extension_with_every_node():
    assert len(NODES) == len(SCHEMAS) == 13
    assert all(node_id.startswith("Ditto") for node_id in SCHEMAS)
    assert (REPO / "web" / "ditto.js").is_file()


@pytest.mark.parametrize("node_id", sorted(SCHEMAS))
def test_schema_is_complete(node_id):
    schema = SCHEMAS[node_id]
    schema.validate()
    assert schema.category == "Ditto"
    assert schema.display_name and schema.description
    for item in schema.inputs:
        assert item.tooltip, f"{node_id}.{item.id} has no tooltip"
        if item.get_io_type() not in WIDGETS:
            continue
        default = item.default
        assert default is not None, f"{node_id}.{item.id} has no default"
        if item.get_io_type() == "COMBO":
            assert default in item.options, f"{node_id}.{item.id}: default {default!r} not in {item.options}"
        if item.get_io_type() in ("INT", "FLOAT"):
            assert item.min <= default <= item.max, f"{node_id}.{item.id}: default out of range"
    for output in schema.outputs:
        assert output.display_name and output.tooltip
    # Found by what a user types, and titled truly on any device (the CPU neither compiles nor is a GPU).
    assert {"talking head", "lip sync", "avatar", "ditto"} <= set(schema.search_aliases)
    assert not {"GPU", "Compiled"} & set(schema.display_name.split()), schema.display_name


def test_search_aliases_only_where_comfyui_takes_them(monkeypatch):
    """ComfyUI versions before search aliases reject unknown Schema fields: the pack still loads there."""
    from comfyui_ditto_pack.nodes import ditto_types

    class OlderSchema:
        def __init__(self, node_id, display_name=None, category="sd"):
            self.node_id, self.display_name, self.category = node_id, display_name, category

    monkeypatch.setattr(ditto_types.io, "Schema", OlderSchema)
    old = ditto_types.schema(node_id="DittoX", display_name="X")
    assert (old.node_id, old.category) == ("DittoX", "Ditto") and not hasattr(old, "search_aliases")


def test_socket_types_connect_the_stages():
    produced = {o.io_type for s in SCHEMAS.values() for o in s.outputs}
    consumed = {i.get_io_type() for s in SCHEMAS.values() for i in s.inputs if i.get_io_type() not in WIDGETS}
    ditto_types = {t for t in produced | consumed if t.startswith("DITTO_")}
    assert ditto_types == {"DITTO_MODELS", "DITTO_SOURCE", "DITTO_AUDIO_FEATURES", "DITTO_MOTION_OPTIONS",
                           "DITTO_MOTION", "DITTO_RENDERS", "DITTO_FRAMES"}
    assert ditto_types <= produced, "a Ditto type is consumed but no node produces it"
    assert {"IMAGE", "VIDEO"} <= produced and {"IMAGE", "AUDIO"} <= consumed


def test_output_nodes_and_seed_widgets():
    assert {n for n, s in SCHEMAS.items() if s.is_output_node} == {"DittoSaveVideo", "DittoTalkingHead", "DittoUnloadModels",
                                                                     "DittoPublishLiveAvatar"}
    for node_id in ("DittoLMDMSampler", "DittoTalkingHead"):
        seed = next(i for i in SCHEMAS[node_id].inputs if i.id == "seed")
        assert seed.control_after_generate and seed.max == 2**64 - 1
    steps = next(i for i in SCHEMAS["DittoLMDMSampler"].inputs if i.id == "steps")
    assert steps.default == 25


@pytest.mark.parametrize("prefix, expected", [
    ("ditto/clip", "ditto/clip"),
    ("../../etc/passwd", "etc/passwd"),
    ("/abs/path/x", "abs/path/x"),
    ("C:\\Users\\me\\..\\x", "C/Users/me/x"),
    ("a/./b//c", "a/b/c"),
    ("  ..  ", "ditto/talking_head"),
    ('bad<>:"|?*name\x00', "badname"),
    ("", "ditto/talking_head"),
])
def test_filename_prefix_cannot_leave_the_output_folder(prefix, expected):
    assert safe_filename_prefix(prefix) == expected


@pytest.fixture
def ditto_roots(tmp_path, monkeypatch):
    """Two registered ``ditto`` roots: the default one (flat) and an extra one (HuggingFace layout)."""
    monkeypatch.setattr(folder_paths, "models_dir", str(tmp_path / "models"))
    monkeypatch.setattr(folder_paths, "folder_names_and_paths", {})
    flat = tmp_path / "models" / "ditto"
    (flat / "aux_models").mkdir(parents=True)
    (flat / "decoder.pth").write_bytes(b"x")
    extra = tmp_path / "extra"
    (extra / "hf" / "ditto_pytorch" / "models").mkdir(parents=True)
    (extra / "hf" / "ditto_pytorch" / "aux_models").mkdir()
    (extra / "hf" / "ditto_pytorch" / "models" / "lmdm_v0.4_hubert.pth").write_bytes(b"x")
    (extra / "notes.txt").write_text("not a model")
    register_model_folder()
    register_model_folder()  # idempotent
    folder_paths.add_model_folder_path("ditto", str(extra))
    return flat, extra


def test_model_folders_are_listed_and_resolved(ditto_roots):
    flat, extra = ditto_roots
    assert folder_paths.get_folder_paths("ditto") == [str(flat), str(extra)]
    # Networks under ditto_pytorch/models/ make their download folder ("hf") the choice: ditto_core
    # finds both the networks and aux_models/ from there.
    assert model_folder_choices() == [".", "hf"]
    assert resolve_model_folder(".") == flat
    assert resolve_model_folder("hf") == extra / "hf"
    assert resolve_model_folder("../../hf") == extra / "hf"
    assert resolve_model_folder("nowhere") == flat / "nowhere"  # named in the missing-files message


def _fake_pipeline(weights: int):
    """Enough of a DittoPipeline for the registry: its six networks, ``weights`` fp32 values in all."""
    from types import SimpleNamespace

    from torch import nn

    from ditto_core.models.checkpoints import NETWORKS

    sizes = [weights - len(NETWORKS) + 1] + [1] * (len(NETWORKS) - 1)
    return SimpleNamespace(models=SimpleNamespace(**{n: nn.Linear(s, 1, bias=False) for n, s in zip(NETWORKS, sizes)}))


def test_registry_builds_once_per_handle_and_releases():
    registry = ModelRegistry()
    calls = []
    a = ModelHandle("/m", "cpu", "fp32")
    b = ModelHandle("/m", "cpu", "bf16")
    build = lambda tag: (lambda: calls.append(tag) or _fake_pipeline(10))  # noqa: E731
    first = registry.pipeline(a, build("a"))
    assert registry.pipeline(a, build("ignored")) is first
    registry.pipeline(b, build("b"))
    assert calls == ["a", "b"]
    assert registry.release(a) == 1
    assert registry.pipeline(a, build("a")) is not first and calls == ["a", "b", "a"]
    assert registry.release() == 2 and registry.release() == 0


def test_the_nodes_device_wide_calls_take_turns_with_recordings(monkeypatch):
    """Emptying the allocator's cache (Unload) and a node's CUDA timer synchronise the whole device:
    both run inside ``between_recordings``, so a live runtime recording its graphs on another
    thread is never broken by them."""
    from comfyui_ditto_pack.nodes import model_registry, runtime
    from comfyui_ditto_pack.nodes.comfy_housekeeping import empty_cache_takes_turns
    from ditto_core import cuda_graphs

    seen = []
    monkeypatch.setattr(model_registry.mm, "soft_empty_cache", lambda: seen.append(("empty", cuda_graphs._running["device_wide"])))
    empty_cache_takes_turns()  # as the pack's load does
    monkeypatch.setattr(cuda_graphs.torch.cuda, "synchronize", lambda device=None: seen.append(("sync", cuda_graphs._running["device_wide"])))
    monkeypatch.setattr(runtime.torch.cuda, "memory_reserved", lambda device=None: 0)
    ModelRegistry().release()
    with timed_stage("Talking Head", torch.device("cuda")):
        pass
    assert seen == [("empty", 1), ("sync", 1)] and cuda_graphs._running["device_wide"] == 0


@pytest.mark.reliability(
    area="Soak and faults",
    case="ComfyUI empties the allocator's cache (after a prompt, before a model load) while a live avatar's "
         "warm-up records CUDA graphs on another thread (a prompt queued right after Publish Live Avatar)",
    behaviour="the pack wraps ComfyUI's soft_empty_cache at load: the call waits for the recording to end and no "
              "recording starts during it (unguarded, the device synchronise inside it breaks the recording and "
              "aborts the server)")
def test_comfyuis_own_cache_emptying_waits_for_a_recording_on_another_thread(monkeypatch):
    """ComfyUI empties the allocator's cache after prompts and before model loads, a device-wide
    call that breaks a live warm-up's recording on another thread and aborts the server: once the
    pack is loaded, ComfyUI's call (``main.py``'s, and ``free_memory``'s inside model_management)
    waits for the recording, with its arguments and result passed through, and a second load
    wraps nothing twice."""
    from comfyui_ditto_pack.nodes.comfy_housekeeping import empty_cache_takes_turns
    from ditto_core import cuda_graphs

    mm = comfy.model_management
    emptied = []
    monkeypatch.setattr(mm, "soft_empty_cache", lambda force=False: emptied.append(force) or "emptied")
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: True)  # ComfyUI's default
    asyncio.run(asyncio.run(pack.comfy_entrypoint()).on_load())
    assert hasattr(mm.soft_empty_cache, "__wrapped__")  # the pack's load wrapped it
    empty_cache_takes_turns()  # a second load
    assert mm.soft_empty_cache.__wrapped__.__name__ == "<lambda>"  # one wrapper over ComfyUI's function
    results = []
    ModelRegistry().pipeline(ModelHandle("/m", "cpu", "fp32"), lambda: _fake_pipeline(1000))  # for free_memory to unload
    with recording_elsewhere():
        housekeeping = started_and_waiting(lambda: results.append(mm.soft_empty_cache(True)),
                                           lambda: mm.free_memory(1e30, mm.get_torch_device()))
        assert emptied == []  # held while the graph is recorded
        emptied.append("recorded")
    for thread in housekeeping:
        thread.join(10)
    assert emptied[0] == "recorded" and sorted(map(str, emptied[1:])) == ["False", "True"] and results == ["emptied"]


def test_comfyui_unload_frees_the_sets_and_the_next_use_reloads_them():
    """ComfyUI's "Unload models" (``unload_all_models``) and its memory pressure (``free_memory``)
    reach Ditto's sets through ``comfy.model_management``; a dropped set leaves its list."""
    mm = comfy.model_management
    registry = ModelRegistry()
    handle = ModelHandle("/m", "cpu", "fp32")
    calls = []
    first = registry.pipeline(handle, lambda: calls.append(1) or _fake_pipeline(1000))
    ours = [m for m in mm.current_loaded_models if getattr(m.model, "handle", None) == handle]
    assert len(ours) == 1 and ours[0].model.loaded_size() == 4000 and ours[0].model.model_size() == 4000
    registry.pipeline(handle)  # already loaded: ComfyUI keeps one entry, nothing is rebuilt
    assert len([m for m in mm.current_loaded_models if getattr(m.model, "handle", None) == handle]) == 1
    assert calls == [1]

    before = mm.SOFT_EMPTY_CACHE_CALLS
    mm.unload_all_models()
    assert not registry.is_loaded(handle) and mm.SOFT_EMPTY_CACHE_CALLS > before
    assert not [m for m in mm.current_loaded_models if getattr(m.model, "handle", None) == handle]
    again = registry.pipeline(handle)
    assert again is not first and calls == [1, 1] and registry.is_loaded(handle)

    mm.free_memory(1e30, torch.device("cpu"))  # another model needs the room
    assert not registry.is_loaded(handle)
    registry.pipeline(handle)
    assert registry.release(handle) == 1
    assert not [m for m in mm.current_loaded_models if getattr(m.model, "handle", None) == handle]


def test_listeners_hear_of_every_dropped_pipeline_before_it_goes():
    """What holds a pipeline beyond a prompt (a live runtime) is told when the set is released or
    when ComfyUI unloads it, so that its VRAM is really freed."""
    mm = comfy.model_management
    registry = ModelRegistry()
    dropped = []
    registry.on_drop(dropped.append)
    registry.on_drop(lambda pipeline: 1 / 0)  # a failing listener does not keep the set loaded
    handle = ModelHandle("/m", "cpu", "fp32")
    build = lambda: _fake_pipeline(10)  # noqa: E731
    first = registry.pipeline(handle, build)
    assert registry.release(handle) == 1 and dropped == [first]
    second = registry.pipeline(handle, build)
    mm.unload_all_models()
    assert dropped == [first, second] and not registry.is_loaded(handle)
    third = registry.pipeline(handle)
    mm.free_memory(1e30, torch.device("cpu"))
    assert dropped == [first, second, third]
    assert registry.release(handle) == 0 and len(dropped) == 3  # nothing loaded: nothing to tell


def test_model_size_before_loading_is_estimated_from_the_checkpoint_files(tmp_path):
    from comfyui_ditto_pack.nodes.model_registry import ResidentModels

    for name, size in (("decoder.pth", 4000), ("lmdm_v0.4_hubert.pth", 400)):
        (tmp_path / name).write_bytes(bytes(size))
    half = ResidentModels(ModelHandle(str(tmp_path), "cpu", "fp16"), lambda: None)
    assert half.model_size() == 2000 + 400  # the LMDM stays fp32
    assert half.loaded_size() == 0 and half.current_loaded_device() == torch.device("cpu")


@pytest.mark.parametrize("malloc_async, warmup", [(True, "deferred"), (False, "foreground")])
def test_comfyuis_pipelines_compile_after_the_first_prompt_under_cuda_malloc_async(monkeypatch, malloc_async, warmup):
    # ComfyUI's default allocator rules out CUDA graphs of compiled code: no prompt then waits for a
    # compile; with PyTorch's own allocator (--disable-cuda-malloc) the first one compiles graph trees.
    from comfyui_ditto_pack.nodes import model_registry

    built = []
    monkeypatch.setattr(model_registry, "uses_cuda_malloc_async", lambda device: malloc_async)
    monkeypatch.setattr(model_registry.DittoPipeline, "from_model_dir", lambda *a, **kw: built.append(kw["warmup"]))
    model_registry._default_builder(ModelHandle("/models", "cuda", "fp16"))()
    assert built == [warmup]


def test_unload_node_releases_and_never_caches():
    unload = next(n for n in NODES if n.GET_SCHEMA().node_id == "DittoUnloadModels")
    assert unload.fingerprint_inputs(enabled=True) != unload.fingerprint_inputs(enabled=True)
    out = unload.execute(enabled=False)
    assert out.ui == {"text": ["released 0 Ditto model set(s)"]}


def test_unload_node_can_be_ordered_after_any_output():
    """An optional input of any type: what it is wired to must exist before the node runs."""
    schema = next(n for n in NODES if n.GET_SCHEMA().node_id == "DittoUnloadModels").GET_SCHEMA()
    after = next(i for i in schema.inputs if i.id == "after")
    assert after.get_io_type() == "*" and after.optional


def test_progress_drives_the_bar_and_honours_interrupts():
    comfy.utils.UPDATES.clear()
    progress = comfy_progress(4)
    progress(1, 4)
    progress(4, 4)
    assert comfy.utils.UPDATES == [(1, 4), (4, 4)]
    comfy.model_management.interrupt_current_processing(True)
    with pytest.raises(comfy.model_management.InterruptProcessingException):
        progress(2, 4)
    progress(3, 4)  # the flag is consumed by the check that raised


def test_staged_progress_fills_one_bar_in_order():
    comfy.utils.UPDATES.clear()
    stage = staged_progress(3)
    stage(0)(1, 2)
    stage(1)(5, 5)
    stage(2)(0, 0)  # an empty stage must not divide by zero
    values = [v for v, _ in comfy.utils.UPDATES]
    assert values == sorted(values) and comfy.utils.UPDATES[1] == (2000, 3000)


def test_timed_stage_reports_seconds_and_fps():
    with timed_stage("Stage") as timer:
        sum(range(10000))
    ui = timer.ui(frames=10)["ditto_stats"][0]
    assert ui["stage"] == "Stage" and ui["frames"] == 10 and ui["seconds"] > 0
    assert math.isclose(ui["fps"], 10 / timer.seconds, rel_tol=1e-2)
    assert "fps" not in timer.ui()["ditto_stats"][0]


@pytest.mark.parametrize("fails", [False, True])
def test_a_node_that_finished_freezes_the_live_objects_for_comfyuis_collection_after_the_prompt(fails):
    import gc

    from ditto_core.gc_pauses import thaw_live_objects

    thaw_live_objects()
    assert gc.get_freeze_count() == 0
    try:
        with pytest.raises(RuntimeError) if fails else contextlib.nullcontext():
            with timed_stage("Stage"):
                assert gc.get_freeze_count() == 0  # the node's own work runs as before
                if fails:
                    raise RuntimeError("a node that failed")
        # Done: frozen for the host's collection after the prompt. Failed: that collection
        # frees what the error held.
        assert (gc.get_freeze_count() > 0) == (not fails)
    finally:
        thaw_live_objects()


def test_sample_inputs_are_copied_once_and_never_over_a_users_file(tmp_path, monkeypatch):
    from PIL import Image

    from comfyui_ditto_pack.nodes.samples import SAMPLE_DIR, SAMPLE_FILES, install_sample_inputs

    monkeypatch.setattr(folder_paths, "_input_directory", str(tmp_path / "input"))
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "ditto_speech.wav").write_bytes(b"the user's own")
    written = install_sample_inputs()
    assert sorted(p.name for p in written) == ["ditto_portrait.jpg", "ditto_source.mp4"]
    assert (tmp_path / "input" / "ditto_speech.wav").read_bytes() == b"the user's own"
    assert Image.open(tmp_path / "input" / "ditto_portrait.jpg").size == (512, 512)
    assert install_sample_inputs() == []
    assert sorted(p.name for p in (tmp_path / "input").iterdir()) == sorted(SAMPLE_FILES)  # no temporary left
    assert "Apache License 2.0" in (SAMPLE_DIR / "README.md").read_text()
