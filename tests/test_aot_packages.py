"""AOTInductor packages: build + load parity (weights handed in at load), cache keys, invalid
entries refused and rebuilt, concurrent builders, build failures falling back; the engine's
``aot`` modes; on a GPU, the CUDA-graph replay and a second process loading from the warm cache.

Real AOTInductor builds are few (a C++ compile each): one of the toy engine per module, and
one of the real networks (``slow``). The cache tests use a builder that copies a built package.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ditto_core import aot_packages
from ditto_core.aot_packages import AotUnavailable, PackageCache, PackageKey, architecture_digest
from ditto_core.render import aot_package, warp_decode
from ditto_core.render.warp_decode import WarpDecodeEngine
from tests.parity import rel_l2
from tests.process_support import child_json
from tests.test_warp_decode import fake_compile, make_motion, make_source, toy_networks, volumes  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
AREA = "Compiled artifacts"
VOLUME = (1, 32, 16, 4, 4)
BATCH = 3


def keypoints(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, 21, 3, generator=torch.Generator().manual_seed(seed)) * 0.1


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """One real package of the toy step (seed-0 weights), copied out of its cache entry."""
    cache = PackageCache(tmp_path_factory.mktemp("aot_build"))
    warp, decoder = toy_networks(0)
    assert aot_package.load_step(cache, warp, decoder, VOLUME, BATCH, 0, build=True) is not None
    (entry,) = [p for p in cache.root.iterdir() if p.name.startswith("warp_decode-")]
    saved = tmp_path_factory.mktemp("aot_saved") / "package.pt2"
    shutil.copy(entry / "package.pt2", saved)
    return saved


def copy_builder(package: Path, calls: list[Path]):
    def build(path: Path) -> dict:
        calls.append(path)
        shutil.copy(package, path)
        return {}
    return build


def toy_key(**changes) -> PackageKey:
    parts = {"device": "cpu x86_64", "torch": "2.x", "cuda": "None", "triton": "3.x", "dtype": "torch.float16",
             "batch_size": 32, "volume": (1, 32, 16, 64, 64), "triton_kernels": 3, "architecture": "abc"}
    return PackageKey.of("warp_decode", {**parts, **changes})


# ----------------------------------------------------------------------------- build and load


def test_loaded_package_runs_on_the_weights_it_is_given(built):
    """Built from seed-0 weights, loaded onto seed-1 networks: it renders what seed 1 renders."""
    warp, decoder = toy_networks(1)
    run = aot_packages.load_with_constants(built, {"baked": [], "baked_sha256": aot_packages._values_digest(warp, [])},
                                           aot_package._Step(warp, decoder), torch.device("cpu"))
    step = aot_package.PackagedStep(run, graphed=False)
    f_s, kp_s, kp_d = volumes(1), keypoints(BATCH, 1), keypoints(BATCH, 2)
    with torch.inference_mode():
        want = aot_package.warp_decode_step(warp, decoder, f_s, kp_s, kp_d)
        assert rel_l2(step(f_s, kp_s, kp_d), want) < 1e-4


def test_engine_aot_mode_builds_once_then_loads_and_matches_eager(tmp_path, monkeypatch, fake_compile):  # noqa: F811
    monkeypatch.setattr(warp_decode, "compile_available", lambda device: (True, ""))
    calls: list[Path] = []
    real_build = aot_package.build_package
    monkeypatch.setattr(aot_package, "build_package", lambda *a, **k: calls.append(a[2]) or real_build(*a, **k))
    warp, decoder = toy_networks(0)
    f_s, kp_s, kp_d = volumes(1), keypoints(BATCH, 1), keypoints(BATCH, 2)
    for expect_build in (True, False):  # a new engine and cache object: a new process's view
        engine = WarpDecodeEngine(warp, decoder, batch_size=BATCH, warmup="aot", aot_cache=PackageCache(tmp_path))
        out = engine.render_batch(f_s, kp_s, kp_d)
        assert engine.stats.graph_batches == 1 and engine.stats.aot_built is expect_build
        assert engine.stats.aot_seconds is not None
        with torch.inference_mode():
            assert rel_l2(out, engine._forward(f_s, kp_s, kp_d)) < 1e-4
    assert len(calls) == 1 and fake_compile == []  # torch.compile never ran


# ----------------------------------------------------------------------------- keys


def test_every_key_part_gives_its_own_entry():
    base = toy_key()
    changed = [toy_key(**{part: value}) for part, value in {
        "device": "NVIDIA H200 sm_90", "torch": "2.y", "cuda": "12.8", "triton": "3.y", "dtype": "torch.bfloat16",
        "batch_size": 16, "volume": (32, 32, 16, 64, 64), "triton_kernels": 0, "architecture": "abd"}.items()]
    folders = {key.folder for key in [base, *changed]}
    assert len(folders) == 1 + len(changed)
    assert toy_key().folder == base.folder  # and the same parts give the same entry


def test_environment_key_names_the_machine_and_versions():
    key = aot_packages.environment_key(torch.device("cpu"))
    assert set(key) == {"device", "torch", "cuda", "triton", "python"} and key["torch"] == torch.__version__


def test_architecture_digest_follows_shapes_and_strides_not_weight_values():
    warp, decoder = toy_networks(0)
    step = aot_package._Step(warp, decoder)
    first = architecture_digest(step)
    assert architecture_digest(aot_package._Step(*toy_networks(1))) == first  # other weights, same digest
    decoder.conv.weight = torch.nn.Parameter(decoder.conv.weight.contiguous(memory_format=torch.channels_last))
    assert architecture_digest(step) != first


# ----------------------------------------------------------------------------- invalid entries


def _corrupt(entry: Path, how: str) -> None:
    package, manifest = entry / "package.pt2", entry / "manifest.json"
    if how == "truncated":
        package.write_bytes(package.read_bytes()[:1000])
    elif how == "flipped byte":
        data = bytearray(package.read_bytes())
        data[len(data) // 2] ^= 0xFF
        package.write_bytes(bytes(data))
    elif how == "stale manifest":
        text = json.loads(manifest.read_text())
        text["key"]["parts"]["torch"] = "1.0"
        manifest.write_text(json.dumps(text))
    elif how == "garbage manifest":
        manifest.write_text("{not json")
    elif how == "no manifest":
        manifest.unlink()


@pytest.mark.reliability(area=AREA, case="an AOT package truncated, altered, or with a stale, garbage or "
                                         "missing manifest",
                         behaviour="refused before loading (size and SHA-256 against its manifest, the key "
                                   "in it), logged, deleted and rebuilt; a reader that may not build leaves "
                                   "it alone")
@pytest.mark.parametrize("how", ["truncated", "flipped byte", "stale manifest", "garbage manifest", "no manifest"])
def test_invalid_entry_is_refused_deleted_and_rebuilt(built, tmp_path, how, caplog):
    cache, key, calls = PackageCache(tmp_path), toy_key(), []
    loads: list[Path] = []

    def load(path: Path, manifest: dict) -> str:
        loads.append(path)
        return aot_packages.file_sha256(path)

    good = cache.load(key, load, copy_builder(built, calls))
    _corrupt(cache.entry(key), how)
    assert cache.load(key, load) is None  # a reader that may not build leaves it alone
    with caplog.at_level(logging.WARNING, logger="ditto_core.aot_packages"):
        assert cache.load(key, load, copy_builder(built, calls)) == good
    assert len(calls) == 2 and "refusing the AOT package" in caplog.text
    assert cache.problem(key) is None


@pytest.mark.reliability(area=AREA, case="an AOT package that verifies but fails to load (e.g. built against"
                                         " another libtorch)",
                         behaviour="refused, deleted and rebuilt once; the rebuilt package is used")
def test_package_that_verifies_but_does_not_load_is_rebuilt(built, tmp_path):
    cache, key, calls = PackageCache(tmp_path), toy_key(), []
    cache.load(key, lambda path, manifest: "ok", copy_builder(built, calls))
    attempts = []

    def load(path: Path, manifest: dict) -> str:
        attempts.append(path)
        if len(attempts) <= 2:  # the reader's try and the builder's re-check
            raise RuntimeError("undefined symbol")  # e.g. a library built against another libtorch
        return "reloaded"

    assert cache.load(key, load, copy_builder(built, calls)) == "reloaded" and len(calls) == 2


@pytest.mark.reliability(area=AREA, case="an AOT package build that fails half-way (no C++ compiler)",
                         behaviour="AotUnavailable naming the cause; no entry and no temporary left")
def test_build_failure_leaves_nothing_and_says_why(tmp_path):
    cache, key = PackageCache(tmp_path), toy_key()

    def build(path: Path) -> dict:
        path.write_bytes(b"half a package")
        raise RuntimeError("no C++ compiler")

    with pytest.raises(AotUnavailable, match="no C\\+\\+ compiler"):
        cache.load(key, lambda path, manifest: "never", build)
    assert cache.problem(key) == "absent" and [p.name for p in tmp_path.iterdir()] == [".locks"]


@pytest.mark.parametrize("child, message", [
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "signal SIGSEGV"),
    # as torch 2.11's loader crashes: the fault handler's report, then the extension modules
    ("import ctypes, numpy; ctypes.string_at(0)",
     "signal SIGSEGV: Fatal Python error: Segmentation fault"),
    ("import sys; sys.exit('no such package')", "status 1: no such package"),
    ("import time; time.sleep(30)", "within 1 s"),
    ("print('not json')", "printed no tensor names"),
])
@pytest.mark.reliability(area=AREA, case="an AOT package whose loader crashes, fails, hangs or prints "
                                         "nothing in a new process (torch 2.11 on an H200 segfaulted there)",
                         behaviour="found by a load check in a child process before the package is "
                                   "published: refused with the signal or status, nothing published, the "
                                   "engine goes on as when a build fails")
def test_a_package_whose_loader_fails_in_a_new_process_is_refused(tmp_path, monkeypatch, child, message):
    # The check runs in a child, so a loader that crashes its process takes only the child.
    monkeypatch.setattr(aot_packages, "_LOAD_CHECK", child)
    monkeypatch.setattr(aot_packages, "LOAD_CHECK_SECONDS", 1.0)
    with pytest.raises(AotUnavailable, match=message):
        aot_packages._constant_names_in_a_new_process(tmp_path / "package.pt2", torch.device("cpu"), False)


@pytest.mark.reliability(area=AREA, case="the engine's AOT build fails",
                         behaviour="the engine warns once, naming the cause, and renders through torch.compile")
def test_engine_falls_back_to_torch_compile_when_the_build_fails(tmp_path, monkeypatch, fake_compile, caplog):  # noqa: F811
    def fail(*args, **kwargs):
        raise RuntimeError("export failed")

    monkeypatch.setattr(aot_package, "build_package", fail)
    monkeypatch.setattr(warp_decode, "announce_once", lambda log, message: log.warning(message))
    engine = WarpDecodeEngine(*toy_networks(0), batch_size=BATCH, warmup="aot", aot_cache=PackageCache(tmp_path))
    with caplog.at_level(logging.WARNING):
        out = engine.render_batch(volumes(1), keypoints(BATCH, 1), keypoints(BATCH, 2))
    assert out.shape == (BATCH, 3, 32, 32) and engine.warmup == "foreground" and len(fake_compile) == 1
    assert "export failed" in caplog.text and "torch.compile is used instead" in caplog.text


_LOOK_UP_IN_AN_EMPTY_CACHE = """
    import json, sys
    from pathlib import Path
    import torch
    from ditto_core.aot_packages import PackageCache
    from ditto_core.render import aot_package
    from tests.test_warp_decode import toy_networks

    before = "torch._dynamo" in sys.modules
    warp, decoder = toy_networks(0)
    step = aot_package.load_step(PackageCache(Path(sys.argv[1])), warp, decoder, (1, 32, 16, 4, 4), 3, 0,
                                 build=False)
    print(json.dumps({"found": step is not None, "before": before, "after": "torch._dynamo" in sys.modules}))
"""


def test_looking_up_a_missing_package_imports_no_dynamo(tmp_path):
    # A new process with --aot and nothing cached renders eagerly; the lookup must not cost it
    # the import of Inductor and Dynamo that registering our operators would.
    seen = child_json(_LOOK_UP_IN_AN_EMPTY_CACHE, str(tmp_path), timeout=300)
    assert seen == {"found": False, "before": False, "after": False}


def test_aot_cached_without_a_package_renders_as_today_and_lists_the_shape(tmp_path, fake_compile):  # noqa: F811
    engine = WarpDecodeEngine(*toy_networks(0), batch_size=BATCH, warmup="aot_cached", aot_cache=PackageCache(tmp_path),
                              compile_min_frames=2500)
    frames = [f for _, f in engine.iter_render(make_source(volumes(1)), make_motion(7))]
    assert sum(f.shape[0] for f in frames) == 7 and engine.aot_missing == [VOLUME]
    assert engine.stats.graph_batches == 0 and fake_compile == []  # a short clip: eager, as the CLI does today
    assert not any(tmp_path.glob("warp_decode-*"))


# ----------------------------------------------------------------------------- two processes

_RACER = """
    import sys, time
    from pathlib import Path
    from ditto_core.aot_packages import PackageCache, PackageKey, file_sha256
    root, package, log = map(Path, sys.argv[1:4])
    key = PackageKey.of("race", {"part": "x"})

    def build(path):
        with open(log, "a") as f:
            f.write("build\\n")
        time.sleep(1.0)  # long enough for the other process to arrive meanwhile
        path.write_bytes(package.read_bytes())
        return {}

    print(PackageCache(root).load(key, lambda path, manifest: file_sha256(path), build))
"""


@pytest.mark.reliability(area=AREA, case="two processes building one AOT package key at once",
                         behaviour="built once (a folder lock), both load the same complete package, one "
                                   "entry")
def test_two_processes_building_one_key_end_with_one_package(built, tmp_path):
    log = tmp_path / "builds.log"
    command = [sys.executable, "-c", textwrap.dedent(_RACER), str(tmp_path / "cache"), str(built), str(log)]
    racers = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [r.communicate(timeout=120)[0].strip() for r in racers]
    assert [r.returncode for r in racers] == [0, 0]
    assert outputs[0] == outputs[1] == aot_packages.file_sha256(built)
    assert log.read_text() == "build\n"
    assert len(list((tmp_path / "cache").glob("race-*"))) == 1


# ----------------------------------------------------------------------------- real networks


@pytest.mark.slow
def test_real_networks_package_matches_eager_on_cpu(tmp_path):
    """The official architecture (random weights) at a small volume: exported, compiled, and
    run on other weights than it was built from."""
    from ditto_core.models.ditto_models import random_ditto_models

    volume, built_from, run_on = (1, 32, 16, 32, 32), random_ditto_models(seed=0), random_ditto_models(seed=1)
    cache = PackageCache(tmp_path)
    assert aot_package.load_step(cache, built_from.warp_network, built_from.decoder, volume, 1, 0, build=True)
    # Seed 1 takes seed 0's values of the few tensors Inductor baked in (the manifest lists them).
    (manifest,) = [json.loads(p.read_text()) for p in tmp_path.glob("warp_decode-*/manifest.json")]
    given, want_from = dict(aot_package._Step(run_on.warp_network, run_on.decoder).named_parameters()), \
        dict(aot_package._Step(built_from.warp_network, built_from.decoder).named_parameters())
    for name in manifest["baked"]:
        given[name].copy_(want_from[name])
    step = aot_package.load_step(cache, run_on.warp_network, run_on.decoder, volume, 1, 0, build=False)
    assert step is not None and cache.builds == 1
    g = torch.Generator().manual_seed(3)
    f_s, kp_s, kp_d = torch.randn(volume, generator=g), keypoints(1, 4), keypoints(1, 5)
    with torch.inference_mode():
        want = aot_package.warp_decode_step(run_on.warp_network, run_on.decoder, f_s, kp_s, kp_d)
        assert rel_l2(step(f_s, kp_s, kp_d), want) < 1e-4


def test_our_triton_operators_trace_into_an_exported_graph():
    pytest.importorskip("triton")
    from ditto_core.models import volume_sampling_triton
    from ditto_core.models.triton_kernels import register_triton_operators

    register_triton_operators()  # as every trace of ours does first

    class Warp(torch.nn.Module):
        def forward(self, volume, grid):
            return volume_sampling_triton.warp_volume(volume, grid)

    program = torch.export.export(Warp(), (torch.zeros(1, 2, 3, 4, 5).half(), torch.zeros(1, 3, 4, 5, 3)))
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    assert "ditto.warp_volume.default" in targets


# ----------------------------------------------------------------------------- GPU

_SECOND_PROCESS = """
    import json, sys, time
    start = time.perf_counter()
    import torch
    from pathlib import Path
    from ditto_core.aot_packages import PackageCache
    from ditto_core.models.ditto_models import random_ditto_models
    from ditto_core.render.warp_decode import WarpDecodeEngine
    models = random_ditto_models("cuda", torch.float16, seed=0)
    engine = WarpDecodeEngine(models.warp_network, models.decoder, batch_size=8, warmup="aot_cached",
                              aot_cache=PackageCache(Path(sys.argv[1])))
    engine.start_warmup()
    print(json.dumps({"aot_seconds": engine.stats.aot_seconds, "built": engine.stats.aot_built,
                      "missing": engine.aot_missing, "since_start": time.perf_counter() - start}))
"""


@pytest.mark.gpu
def test_cuda_package_replays_its_graph_correctly_and_a_second_process_loads_it(tmp_path):
    from ditto_core.models.ditto_models import random_ditto_models

    models = random_ditto_models("cuda", torch.float16, seed=0)
    engine = WarpDecodeEngine(models.warp_network, models.decoder, batch_size=8, warmup="aot",
                              aot_cache=PackageCache(tmp_path))
    engine.start_warmup()
    assert engine.stats.aot_built and engine.stats.triton_kernels > 0
    g = torch.Generator("cuda").manual_seed(0)
    f_s = torch.randn(1, 32, 16, 64, 64, device="cuda", generator=g).half()
    outs, wants = [], []
    for seed in (1, 2, 3):  # each replay's output copied before the next overwrites the graph's
        kp_s, kp_d = (keypoints(8, seed + k).cuda() for k in (0, 10))
        outs.append(engine.render_batch(f_s, kp_s, kp_d))
        with torch.inference_mode():
            wants.append(engine._forward(f_s, kp_s, kp_d))
    for out, want in zip(outs, wants):
        assert rel_l2(out.float(), want.float()) < 5e-3  # fp16: Inductor's fusions round differently
    assert rel_l2(outs[0].float(), outs[1].float()) > 1e-3  # the copies are of different frames
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_SECOND_PROCESS), str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    second = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"second process: package loaded in {second['aot_seconds']:.2f} s, "
          f"{second['since_start']:.2f} s from interpreter start")
    assert not second["built"] and second["missing"] == []


def test_a_background_build_that_failed_is_not_started_again(tmp_path):
    """The CLI's --aot starts a detached builder after its MP4; one that dies (here: a models
    folder it cannot load) leaves its attempt file, and later runs say so instead of starting
    the same doomed build on every call."""
    from types import SimpleNamespace

    from ditto_core.aot_packages import PackageCache
    from ditto_core.render.aot_build import build_in_background

    engine = SimpleNamespace(aot_missing=[(1, 32, 16, 64, 64)], device=torch.device("cpu"), dtype=torch.float32,
                             batch_size=2, aot_cache=PackageCache(tmp_path / "aot"))
    said = []
    builder = build_in_background(engine, tmp_path / "no_models", seed=0, status=said.append)
    assert builder is not None and "in the background" in said[-1]
    assert builder.wait(timeout=300) != 0
    attempts = list((tmp_path / "aot").glob("build-attempt-*.pid"))
    assert len(attempts) == 1
    assert build_in_background(engine, tmp_path / "no_models", seed=0, status=said.append) is None
    assert "earlier build did not finish" in said[-1] and str(attempts[0]) in said[-1]
    attempts[0].unlink()  # the user's way to try again
    retried = build_in_background(engine, tmp_path / "no_models", seed=0, status=said.append)
    assert retried is not None
    retried.wait(timeout=300)


def test_builds_under_way_lists_the_attempts_whose_builder_still_runs(tmp_path):
    """What a benchmark waits for before its next process: attempt files anywhere under the
    folder that name a live process; a dead builder's file (it stays, see above) and other
    files are not waited for."""
    import os
    import subprocess
    import sys

    from ditto_core.render.aot_build import builds_under_way

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "aot").mkdir()
    running = tmp_path / "aot" / "build-attempt-0123456789abcdef.pid"
    running.write_text(f"{os.getpid()}\n")
    (tmp_path / "build-attempt-fedcba9876543210.pid").write_text(ended.stdout)
    (tmp_path / "aot" / "worker.pid").write_text(f"{os.getpid()}\n")
    assert builds_under_way(tmp_path) == [running]
    running.unlink()
    assert builds_under_way(tmp_path) == []
