"""Shared test fixtures: the reference parity kit and official-layout random checkpoints.

The parity kit lives in ``shared/reference`` beside the checkout (``../shared``); set
``DITTO_SHARED`` to point elsewhere. Checkpoints are written once per session by the kit's
``make_checkpoints.py --seed 0`` (about 10 s); set ``DITTO_TEST_CKPT_DIR`` to reuse a folder
that already holds them (their content digests are still checked by the loader tests).

On a CPU-only machine the suite runs in two pytest-xdist worker processes (``-n auto`` in
pyproject.toml, see ``pytest_xdist_auto_num_workers``), a test file per worker at a time;
``-n 0`` runs it in this process.
"""
from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from bench.kit_checkpoints import OFFICIAL_FILES, write_kit_checkpoints
from ditto_core.atomic_files import folder_lock

REPO_ROOT = Path(__file__).resolve().parents[1]
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... in a worker process
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
MAX_WORKERS = 2  # the suite is measured with two (the CI machine has two cores)
# The pack's per-user caches (mapped HuBERT weights, compiled kernels) go to a folder of this
# run, not to the user's ~/.cache; subprocesses of the tests inherit it. Workers inherit the
# controller's folder and take a subfolder each: no test sees another's cache entries appear.
os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="ditto-test-cache-"))
if XDIST_WORKER:
    os.environ["XDG_CACHE_HOME"] = os.path.join(os.environ["XDG_CACHE_HOME"], XDIST_WORKER)
    # Each worker gets its share of the cores, for its own torch and for the processes it
    # starts. More threads than cores makes OpenMP's threads wait on each other: small tensor
    # operations then run many times slower.
    _threads = max(1, CORES // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)
SHARED = Path(os.environ.get("DITTO_SHARED", REPO_ROOT.parent / "shared"))
REFERENCE = SHARED / "reference"
EXAMPLE = SHARED / "data" / "ditto_example"


def pytest_xdist_auto_num_workers(config):
    """Workers for ``-n auto``: two on a CPU-only machine with two cores or more (most of the
    suite's time is one-core work: imports, Inductor's code generation, child processes). None
    (this process) where CUDA is available (the GPU tests measure one device's memory and time),
    for ``--collect-only`` (``tests/reliability_table.py`` collects in its own process) and for
    one test file (a file's tests stay in one worker: a second would only start and stop)."""
    files = {arg.split("::")[0] for arg in config.args}
    one_file = len(files) == 1 and next(iter(files)).endswith(".py")
    if config.option.collectonly or one_file or torch.cuda.is_available() or CORES < 2:
        return 0
    return MAX_WORKERS


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _no_warm_worker(tmp_path_factory, monkeypatch):
    """Renders in tests never reach a warm worker the developer may have running (test_worker.py
    starts its own on sockets of its own)."""
    monkeypatch.setenv("DITTO_WORKER_SOCKET", str(tmp_path_factory.getbasetemp() / "no_worker" / "worker.sock"))


@pytest.fixture(autouse=True)
def _no_freeze_between_tests():
    """A node's freeze of the live objects (gc_pauses.freeze_live_objects) ends with the test
    that made it: a later test that drops an older object and collects finds it collectable."""
    yield
    from ditto_core.gc_pauses import thaw_live_objects

    thaw_live_objects()


@pytest.fixture
def thawed():
    """No object frozen before the test (by a node or anything else), and none after it, whether it
    froze them for a while (freeze_live_objects) or for good (freeze_for_the_process)."""
    import gc

    from ditto_core.gc_pauses import thaw_live_objects

    thaw_live_objects()
    assert gc.get_freeze_count() == 0, "a freeze from outside the test"
    yield
    thaw_live_objects()
    gc.unfreeze()


@pytest.fixture(autouse=True)
def _exact_float32():
    """Parity is defined in strict fp32: no TF32 anywhere, whatever a test did before."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    yield


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    if not (REFERENCE / "weights_manifest.json").is_file():
        pytest.fail(f"reference parity kit not found at {REFERENCE}; set DITTO_SHARED")
    return REFERENCE


@pytest.fixture(scope="session")
def example_dir() -> Path:
    if not (EXAMPLE / "portrait.jpg").is_file():
        pytest.fail(f"example data not found at {EXAMPLE}; set DITTO_SHARED")
    return EXAMPLE


@pytest.fixture(scope="session")
def official_ckpt_dir(reference_dir, tmp_path_factory) -> Path:
    """A folder holding the six official checkpoint files with seed-0 random weights."""
    given = os.environ.get("DITTO_TEST_CKPT_DIR")
    if given:
        out = Path(given)
    elif XDIST_WORKER:  # one folder for the run's workers (their base folders share a parent)
        out = tmp_path_factory.getbasetemp().parent / "ditto_ckpt_seed0"
    else:
        out = tmp_path_factory.mktemp("ditto_ckpt_seed0")
    with folder_lock(out):  # the first worker writes them, the other waits and reuses them
        if not all((out / f).is_file() for f in OFFICIAL_FILES):
            _make_checkpoints(reference_dir, out)
    return out


def _make_checkpoints(reference_dir: Path, out: Path) -> None:
    try:
        differs = write_kit_checkpoints(reference_dir / "make_checkpoints.py", out)
    except RuntimeError as error:
        pytest.fail(str(error))
    if differs:
        warnings.warn(f"make_checkpoints.py: {differs}; testing on these files")


@pytest.fixture(scope="session")
def load_case(reference_dir):
    def load(name: str) -> dict:
        case = reference_dir / "cases" / f"{name}.pt"
        if not case.is_file():  # a partial copy of the kit (a device call carries only what it needs)
            pytest.fail(f"reference case {case.name} not found in {case.parent}; copy the kit's cases/ folder or set DITTO_SHARED")
        return torch.load(case, weights_only=True)

    return load

