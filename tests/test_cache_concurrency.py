"""Several processes sharing one avatar cache, one converted-weights folder or one output path
(two ComfyUI instances, a ComfyUI and a CLI, batch workers): real processes, started with
``spawn`` as ComfyUI's and the CLI's would be, hammering the same files at once."""
from __future__ import annotations

import multiprocessing
import os
import time
import warnings
from pathlib import Path

import pytest

from ditto_core.atomic_files import atomic_target, parse_temp_name

AREA = "Files and processes"
KEY = "ab" * 32
WORKERS = 3


def _hammer_cache(root: str, writer: int, seconds: float) -> dict:
    """Store and load one key over and over; every entry read must be one writer's whole entry."""
    import torch

    from ditto_core.registration.cache import AvatarCache

    cache = AvatarCache(root)
    # Sizes differ per writer, so a mixture of two writers' files cannot pass for an entry.
    mine = {"f_s": torch.full((1, 8 + writer, 64, 64), float(writer)), "M_c2o": torch.full((1, 3, 3), float(writer))}
    counts = {"stored": 0, "loaded": 0, "missed": 0, "writers_seen": set()}
    _start_together(Path(root).parent / "ready", writer)
    deadline = time.monotonic() + seconds
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a damaged entry warns: fail on it
        while time.monotonic() < deadline:
            cache.store(KEY, mine, {"writer": writer})
            counts["stored"] += 1
            for _ in range(3):
                loaded = cache.load(KEY)
                if loaded is None:
                    counts["missed"] += 1  # between another writer's two renames: a miss, never half
                    continue
                tensors, meta = loaded
                who = meta["writer"]
                assert tensors["f_s"].shape[1] == 8 + who and bool((tensors["f_s"] == who).all())
                assert bool((tensors["M_c2o"] == who).all())
                counts["loaded"] += 1
                counts["writers_seen"].add(who)
    return counts


def _start_together(folder: Path, worker: int) -> None:
    """Return once all WORKERS workers have called this (so their loops overlap however slowly
    each one started)."""
    folder.mkdir(exist_ok=True)
    (folder / str(worker)).touch()
    while len(list(folder.iterdir())) < WORKERS:
        time.sleep(0.01)


def _spawn_pool():
    return multiprocessing.get_context("spawn").Pool(WORKERS)


@pytest.mark.slow
@pytest.mark.reliability(area=AREA, case="three processes storing and loading the same avatar cache entry at once",
                         behaviour="every load is one writer's complete entry (tensors and metadata agree) or a "
                                   "miss; no damaged-entry warning; one entry and no temporary left")
def test_processes_sharing_an_avatar_cache_never_see_half_an_entry(tmp_path):
    from ditto_core.registration.cache import AvatarCache

    root = tmp_path / "cache"
    with _spawn_pool() as pool:
        results = pool.starmap(_hammer_cache, [(str(root), writer, 3.0) for writer in range(WORKERS)])
    assert all(r["stored"] > 0 and r["loaded"] > 0 for r in results), results
    assert len(set().union(*(r["writers_seen"] for r in results))) > 1, f"the writers never overlapped: {results}"
    assert [p.name for p in root.iterdir()] == [KEY]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert AvatarCache(root).load(KEY) is not None


def _write_slowly(target: str, writer: int, chunks: int) -> None:
    """Stream ``chunks`` blocks into ``target`` through a temporary, as an encoder does."""
    with atomic_target(target, suffix=".part.mp4") as temp:
        with open(temp, "wb") as f:
            for _ in range(chunks):
                f.write(bytes([writer]) * 65536)
                f.flush()
                time.sleep(0.01)


@pytest.mark.reliability(area=AREA, case="two jobs writing the same output path at once",
                         behaviour="the path ends up holding one job's complete file (the last to finish), never a "
                                   "mixture or a prefix; no temporary left")
def test_two_jobs_writing_one_output_path_leave_one_complete_file(tmp_path):
    target = tmp_path / "clip.mp4"
    with _spawn_pool() as pool:
        pool.starmap(_write_slowly, [(str(target), writer, 20 + 10 * writer) for writer in (1, 2)])
    data = target.read_bytes()
    writer = data[0]
    assert writer in (1, 2) and data == bytes([writer]) * (65536 * (20 + 10 * writer))
    assert [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]
    assert not any(parse_temp_name(name) for name in os.listdir(tmp_path))


def _stitch_source(folder: Path, seed: int) -> Path:
    """An official-layout stitch_network.pth with seed-``seed`` weights (the smallest network)."""
    import torch

    from ditto_core.models.stitch_network import StitchingNetwork

    torch.manual_seed(seed)
    state = {f"module.{k}": v for k, v in StitchingNetwork().state_dict().items()}
    folder.mkdir(parents=True)
    torch.save({"retarget_shoulder": state}, folder / "stitch_network.pth")
    return folder


def _convert_repeatedly(src: str, dst: str, times: int) -> None:
    from ditto_core.models.checkpoints import convert_weights

    for _ in range(times):
        convert_weights(src, dst)


def _check_repeatedly(dst: str, stop: str) -> int:
    """Read the index and the file it describes as a set, as the model loader does (under the
    folder's shared lock), until ``stop`` exists; return how many reads found them consistent."""
    import json

    from ditto_core.atomic_files import file_sha256, folder_lock

    folder, consistent = Path(dst), 0
    while not Path(stop).exists():
        with folder_lock(folder, shared=True):
            try:
                index = json.loads((folder / "ditto_models.json").read_text())
            except FileNotFoundError:
                continue  # before the first conversion finished
            recorded = index["stitch_network.safetensors"]["sha256"]
            assert recorded == file_sha256(folder / "stitch_network.safetensors"), "index and file disagree"
            consistent += 1
    return consistent


@pytest.mark.slow
@pytest.mark.reliability(area=AREA, case="two processes converting different weights into one folder while a third "
                                          "loads from it (convert-weights, model loading)",
                         behaviour="conversions take turns and loaders read between them (flock on the folder): the "
                                   "index always matches the files beside it, no temporary is left")
def test_concurrent_conversions_into_one_folder_stay_consistent(tmp_path):
    import json

    from ditto_core.atomic_files import file_sha256
    from ditto_core.models.checkpoints import load_network

    sources = [_stitch_source(tmp_path / f"src{seed}", seed) for seed in (1, 2)]
    dst = tmp_path / "converted"
    stop = tmp_path / "stop"
    with _spawn_pool() as pool:
        reader = pool.apply_async(_check_repeatedly, (str(dst), str(stop)))
        pool.starmap(_convert_repeatedly, [(str(src), str(dst), 60) for src in sources])
        stop.touch()
        assert reader.get(timeout=120) > 0
    index = json.loads((dst / "ditto_models.json").read_text())
    assert sorted(p.name for p in dst.iterdir()) == ["ditto_models.json", "stitch_network.safetensors"]
    assert index["stitch_network.safetensors"]["sha256"] == file_sha256(dst / "stitch_network.safetensors")
    assert load_network("stitch_network", dst) is not None


def _compile_and_count(cache_dir: str) -> tuple[list[float], int]:
    """Compile a small function with Inductor (CPU, C++) through the pack's compile cache folder;
    return its result and how many FX-graph cache hits the compile had."""
    import torch
    from torch._dynamo.utils import counters

    from ditto_core.render.warp_decode import use_compile_cache

    use_compile_cache(Path(cache_dir))

    def f(x):
        return torch.sin(x) * 2 + x.cos().sum()

    out = torch.compile(f)(torch.arange(8, dtype=torch.float32))
    return out.tolist(), counters["inductor"]["fxgraph_cache_hit"]


@pytest.mark.slow
@pytest.mark.reliability(area=AREA, case="processes compiling into one compile cache folder at once (Inductor's "
                                          "FX-graph and kernel caches, CPU)",
                         behaviour="both compile and agree; a later process loads the graph from the shared folder "
                                   "(a cache hit) with the same result: no entry corrupted")
def test_processes_sharing_the_compile_cache_folder(tmp_path):
    import torch

    cache = tmp_path / "inductor"
    with _spawn_pool() as pool:
        first = pool.map(_compile_and_count, [str(cache)] * 2)
    with _spawn_pool() as pool:
        later = pool.apply(_compile_and_count, (str(cache),))
    x = torch.arange(8, dtype=torch.float32)
    expected = (torch.sin(x) * 2 + x.cos().sum()).tolist()
    for result, _ in (*first, later):
        assert result == pytest.approx(expected, rel=1e-6)
    assert later[1] >= 1, "the shared compile cache was not used"
