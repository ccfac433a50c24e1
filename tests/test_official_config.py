"""Ditto's official config read as data (never unpickled), and its blink table wired through the
loader, the pipeline and the Eye Lock / Motion Options node.

Test configs are written with the real ``pickle`` module (allowed here: the no-unpickling rule
covers the shipped package), shaped like ``ditto_cfg/v0.4_hubert_cfg_pytorch.pkl``.
"""
from __future__ import annotations

import asyncio
import logging
import os
import pickle
import pickletools
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.comfy_stubs import load_pack

pack = load_pack()

from ditto_core.audio.audio_features import AudioFeatures  # noqa: E402
from ditto_core.errors import CheckpointError, MissingModelError  # noqa: E402
from ditto_core.models import ditto_models  # noqa: E402
from ditto_core.models.ditto_models import load_ditto_models, random_ditto_models  # noqa: E402
from ditto_core.models.official_config import (  # noqa: E402
    CONFIG_DIR, CONFIG_FILE, OpaqueObject, blink_table, read_config,
)
from ditto_core.models.keypoints import EYE_KP  # noqa: E402
from ditto_core.motion.blinks import blink_schedule  # noqa: E402
from ditto_core.motion.motion_options import MotionOptions  # noqa: E402
from ditto_core.model_files import check_model_files, find_config  # noqa: E402
from ditto_core.pipeline import DittoPipeline  # noqa: E402
from ditto_core.registration.aux_models import AuxModels  # noqa: E402
from tests.test_conditions import random_source  # noqa: E402

PROTOCOLS = (2, 4, 5)
CALLS: list[str] = []
"""Every call into the test's tripwire objects; reading a config must leave it empty."""


class _Tripwire:
    """Pickled as NEWOBJ + BUILD: unpickling would call ``__setstate__``."""

    def __init__(self) -> None:
        self.armed = True

    def __setstate__(self, state: dict) -> None:
        CALLS.append("Tripwire.__setstate__")
        self.__dict__.update(state)


def _detonate(payload: str) -> None:
    CALLS.append(f"_detonate({payload})")
    raise RuntimeError("a config reader ran code named in the file")


class _Bomb:
    """Pickled as REDUCE of a module-level function: unpickling would call ``_detonate``."""

    def __reduce__(self):
        return _detonate, ("payload",)


class _Shell:
    """Pickled as REDUCE of ``os.system``: unpickling would run the command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _table(rows: int = 15) -> np.ndarray:
    return np.random.default_rng(rows).normal(0, 0.01, (rows, 63)).astype(np.float32)


def official_like(table: np.ndarray) -> dict:
    """The official config's layout, with one of each kind of value a config may hold."""
    return {
        "base_cfg": {
            "appearance_extractor_cfg": {"model_path": "models/appearance_extractor.pth", "device": "cuda"},
            "landmark478_cfg": {"task_path": None, "blaze_face_model_path": "", "face_mesh_model_path": ""},
        },
        "audio2motion_cfg": {"model_path": "models/lmdm_v0.4_hubert.pth", "use_emo": True, "seq_frames": 80,
                             "motion_feat_dim": 265, "w2f_type": "hubert"},
        "default_kwargs": {
            "delta_eye_arr": table,
            "emo": np.eye(8, dtype=np.float32)[np.arange(600) % 8],
            "fix_kp_cond_dim": np.array([0, 202], dtype=np.int64),
            "v_min_max_for_clip": np.linspace(-2, 2, 4 * 265).reshape(4, 265).astype(">f8"),  # big-endian
            "fortran": np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)),
            "mask": np.array([True, False, True]),
            "sampling_timesteps": np.int64(50),
            "crop_scale": np.float32(2.3),
            "flag": np.bool_(True),
            "overall_ctrl_info": {"delta_pitch": 2},
            "use_d_keys": ("exp", "pitch"),
            "keys": ["exp", 1, 2.5, None, True, 2**70],
            "ids": {3, 1}, "frozen": frozenset({"a"}), "raw": b"\x00\xff", "empty": b"",
            "tripwire": _Tripwire(),
            "bomb": _Bomb(),
        },
    }


def _assert_same(got, want, where="config"):
    """Equal structure, values and (native-order) dtypes; the test's objects as placeholders."""
    if isinstance(want, (_Tripwire, _Bomb)):
        assert isinstance(got, OpaqueObject), where
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype.newbyteorder("="), where
        assert got.dtype.isnative and np.array_equal(got, want), where
    elif isinstance(want, np.generic):
        assert type(got) is type(want) and got == want, where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for key in want:
            _assert_same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{i}]")
    else:
        assert type(got) is type(want) and got == want, where


def _write(path: Path, obj, protocol: int = 4) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    return path


# ------------------------------------------------------------------------------ the reader


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_reader_rebuilds_the_data_and_runs_nothing(tmp_path, protocol):
    want = official_like(_table())
    path = _write(tmp_path / CONFIG_FILE, want, protocol)
    CALLS.clear()
    got = read_config(path)
    assert CALLS == []
    _assert_same(got, want)
    extras = got["default_kwargs"]
    assert extras["tripwire"].name == f"{__name__}._Tripwire" and extras["tripwire"].state == {"armed": True}
    assert extras["bomb"].name == f"{__name__}._detonate" and extras["bomb"].args == ("payload",)
    table = blink_table(got, path)
    assert table.dtype == torch.float32
    assert torch.equal(table, torch.from_numpy(want["default_kwargs"]["delta_eye_arr"]))

    # The same bytes, really unpickled, do call the tripwires: the assertions above can fail.
    with pytest.raises(RuntimeError, match="ran code"):
        pickle.loads(path.read_bytes())  # unsafe-ok: the test's own file, proving the tripwire is live
    assert CALLS


@pytest.mark.parametrize("protocol", (2, 5))
def test_numpy_1x_module_names(tmp_path, monkeypatch, protocol):
    """numpy 1.x writes ``numpy.core.*`` where numpy 2.x writes ``numpy._core.*``."""
    functions = (np.ones(1).__reduce__()[0], np.ones(1).__reduce_ex__(5)[0], np.float32(1).__reduce__()[0])
    for fn in functions:
        monkeypatch.setattr(fn, "__module__", fn.__module__.replace("numpy._core", "numpy.core"))
    want = {"default_kwargs": {"delta_eye_arr": _table(), "scale": np.float32(1.5)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy 2's numpy.core shim
        path = _write(tmp_path / "legacy.pkl", want, protocol)
    names = [arg for _, arg, _ in pickletools.genops(path.read_bytes()) if isinstance(arg, str)]
    assert any(n.startswith("numpy.core") for n in names) and not any("numpy._core" in n for n in names)
    _assert_same(read_config(path), want)


@pytest.mark.reliability(area="Safety", case="Ditto config pickle (ditto_cfg/*.pkl) naming code: os.system, "
                                              "a module that runs code on import",
                         behaviour="read as data by an opcode interpreter: the names become inert placeholders; "
                                   "nothing is imported or called")
def test_code_in_a_config_never_runs(tmp_path, monkeypatch):
    marker = tmp_path / "shell_ran"
    shell = _write(tmp_path / "shell.pkl", {"default_kwargs": {"x": _Shell(f"touch {marker}")}}, 2)
    # A module whose import leaves a mark, named by a GLOBAL the reader must not resolve.
    imported = tmp_path / "imported"
    (tmp_path / "ditto_probe_mod.py").write_text(f"open({str(imported)!r}, 'w').close()\ndef boom():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = tmp_path / "probe.pkl"
    probe.write_bytes(b"\x80\x02}X\x04\x00\x00\x00evilcditto_probe_mod\nboom\n)Rs.")

    placeholder = read_config(shell)["default_kwargs"]["x"]
    assert (placeholder.name, placeholder.args) == ("posix.system" if os.name == "posix" else "nt.system",
                                                    (f"touch {marker}",))
    assert read_config(probe)["evil"].name == "ditto_probe_mod.boom"
    assert not marker.exists() and not imported.exists() and "ditto_probe_mod" not in sys.modules

    # Both files are live payloads: really unpickled, they act.
    assert pickle.loads(probe.read_bytes()) == {"evil": 1} and imported.exists()  # unsafe-ok: test's own payload
    monkeypatch.delitem(sys.modules, "ditto_probe_mod")
    if os.name == "posix":
        pickle.loads(shell.read_bytes())  # unsafe-ok: the test's own payload, a harmless touch
        assert marker.exists()


class _BadArray:
    """An ndarray whose state promises 6 float32 values but carries 8 bytes."""

    def __reduce__(self):
        return np.ones(1).__reduce__()[0], (np.ndarray, (0,), b"b"), (1, (2, 3), np.dtype("f4"), False, b"\0" * 8)


def _good() -> bytes:
    return pickle.dumps(official_like(_table()), protocol=4)


DAMAGED = {
    "empty": lambda: b"",
    "truncated": lambda: _good()[: len(_good()) // 2],
    "no STOP": lambda: _good()[:-1],
    "not a pickle": lambda: b"model_path: models/lmdm.pth\n",
    "unknown opcode": lambda: _good()[:2] + b"\xff" + _good()[2:],
    "persistent id": lambda: b"\x80\x02}X\x01\x00\x00\x00aP0\ns.",
    "top level is a list": lambda: pickle.dumps([1, 2], protocol=4),
    "object array": lambda: pickle.dumps({"default_kwargs": {"a": np.array([None, 1], dtype=object)}}, protocol=4),
    "array data size": lambda: pickle.dumps({"default_kwargs": {"a": _BadArray()}}, protocol=4),
}


@pytest.mark.reliability(area="Models", case="Ditto config (ditto_cfg/*.pkl) truncated, corrupted, foreign, or "
                                              "holding an object array or inconsistent array data",
                         behaviour="CheckpointError naming the file and saying to re-download it (or remove it to "
                                   "run without blinks)")
@pytest.mark.parametrize("damage", list(DAMAGED))
def test_damaged_config_is_refused(tmp_path, damage):
    path = tmp_path / CONFIG_DIR / CONFIG_FILE
    path.parent.mkdir()
    path.write_bytes(DAMAGED[damage]())
    with pytest.raises(CheckpointError, match=rf"{CONFIG_FILE}.*Re-download .*remove it to run without"):
        read_config(path)


def test_missing_config_is_a_missing_model(tmp_path):
    with pytest.raises(MissingModelError, match=CONFIG_FILE):
        read_config(tmp_path / CONFIG_FILE)


def test_blink_table_checks_the_entry():
    assert blink_table({}) is None and blink_table({"default_kwargs": {}}) is None
    assert blink_table({"default_kwargs": "not a dict"}) is None
    table = blink_table({"default_kwargs": {"delta_eye_arr": _table(4).astype(np.float64)}})
    assert table.shape == (4, 63) and table.dtype == torch.float32
    bad_shape = {"default_kwargs": {"delta_eye_arr": np.zeros((15, 62), np.float32)}}
    with pytest.raises(CheckpointError, match=r"cfg.pkl: .*\(K, 63\).*shape \(15, 62\)"):
        blink_table(bad_shape, "cfg.pkl")
    nan = _table(3)
    nan[1, 5] = np.nan
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        blink_table({"default_kwargs": {"delta_eye_arr": nan}})
    with pytest.raises(CheckpointError, match="numeric array"):
        blink_table({"default_kwargs": {"delta_eye_arr": [[0.0] * 63]}})


def test_find_config_prefers_pytorch_then_trt(tmp_path):
    folder = tmp_path / CONFIG_DIR
    folder.mkdir()
    assert find_config(tmp_path) is None
    for name in ("v0.4_hubert_cfg_trt_online.pkl", "v0.4_hubert_cfg_trt.pkl", "notes.txt"):
        (folder / name).write_bytes(b"")
    assert find_config(tmp_path) == folder / "v0.4_hubert_cfg_trt.pkl"
    (folder / "my_pytorch_cfg.pkl").write_bytes(b"")
    assert find_config(tmp_path) == folder / "my_pytorch_cfg.pkl"
    (folder / CONFIG_FILE).write_bytes(b"")
    assert find_config(tmp_path) == folder / CONFIG_FILE


# ------------------------------------------------------------------------------ loader and CLI message


def test_loader_reads_the_blink_table(tmp_path, official_ckpt_dir):
    for file in Path(official_ckpt_dir).glob("*.pth"):
        (tmp_path / file.name).symlink_to(file)
    table = _table()
    _write(tmp_path / CONFIG_DIR / CONFIG_FILE, official_like(table), 4)
    models = load_ditto_models(tmp_path)
    assert models.blink_table.dtype == torch.float32 and models.blink_table.device == models.device
    assert torch.equal(models.blink_table, torch.from_numpy(table))


def test_without_a_config_blinks_are_off_and_only_a_run_that_wants_them_says_where_it_goes(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=ditto_models.__name__):
        assert ditto_models._load_blink_table(tmp_path) is None
    assert not caplog.text, "loading says nothing: a run with blinks off needs no config"
    models = replace(random_ditto_models("cpu"), blink_table=None)
    pipeline = DittoPipeline(models, AuxModels(), hubert=None, compile=False, model_dir=tmp_path)
    with caplog.at_level(logging.INFO, logger="ditto_core.pipeline"):
        pipeline.with_blink_table(MotionOptions(delta_eye_open_n=-1))
        assert not caplog.text
        pipeline.with_blink_table(MotionOptions())  # Ditto's default: random blinks
    assert str(tmp_path / CONFIG_DIR / CONFIG_FILE) in caplog.text
    caplog.clear()
    _write(tmp_path / CONFIG_DIR / CONFIG_FILE, {"default_kwargs": {"emo": 4}})
    with caplog.at_level(logging.WARNING, logger=ditto_models.__name__):
        assert ditto_models._load_blink_table(tmp_path) is None
    assert "no default_kwargs['delta_eye_arr']" in caplog.text


def test_missing_files_message_lists_the_config_as_optional(tmp_path):
    with pytest.raises(MissingModelError, match=rf"Optional, for Ditto's procedural blinks: {CONFIG_FILE} -> "
                                                rf".*/{CONFIG_DIR}/"):
        check_model_files(tmp_path)
    _write(tmp_path / CONFIG_DIR / CONFIG_FILE, {"default_kwargs": {}})
    with pytest.raises(MissingModelError) as info:
        check_model_files(tmp_path)
    assert "Optional" not in str(info.value)


# ------------------------------------------------------------------------------ pipeline


@pytest.fixture(scope="module")
def pipeline():
    return DittoPipeline(random_ditto_models("cpu"), AuxModels(), hubert=None, compile=False)


def test_random_models_carry_a_stand_in_blink(pipeline):
    table = pipeline.models.blink_table.reshape(-1, 21, 3)
    assert table.shape[0] == 7 and not table[0].any() and not table[-1].any()
    moved = table.abs().sum(0).nonzero().tolist()
    assert moved == [[kp, 1] for kp in EYE_KP]  # eyelid keypoints, vertically


def test_pipeline_blinks_on_the_scheduled_frames(pipeline, monkeypatch):
    frames, gap = 40, 5
    source = random_source(1, is_image=True, seed=3)
    audio = AudioFeatures(features=torch.randn(frames, 1024, generator=torch.Generator().manual_seed(2)),
                          duration_s=frames / 25)
    base = MotionOptions(steps=2, flag_stitching=False)

    def driving(**changes):
        return pipeline.motion(source, audio, replace(base, **changes)).kp_driving

    table = pipeline.models.blink_table
    blinking = driving(delta_eye_open_n=gap)
    open_eyes = driving(delta_eye_open_n=gap, delta_eye_arr=torch.zeros_like(table))
    rows = blink_schedule(frames, len(table), gap)
    shows_blink = table[rows].abs().sum(1) > 0
    assert shows_blink.sum() >= 10  # three blinks fit in 40 frames
    differs = (blinking != open_eyes).any(-1)  # (frames, 21)
    assert torch.equal(differs.any(1), shows_blink)
    assert not differs[:, [k for k in range(21) if k not in EYE_KP]].any()

    # Ditto's default (random gaps of 60-100 frames) uses the table too: no blink fits in 40
    # frames, so the eyes stay the source's, exactly as with an all-open table.
    assert torch.equal(driving(), open_eyes)

    # Off (-1), as in Ditto: the table's open row on every frame, so the source's eyes.
    assert torch.equal(driving(delta_eye_open_n=-1), open_eyes)
    # Without a table the eyes follow the generated motion.
    monkeypatch.setattr(pipeline.models, "blink_table", None)
    assert not torch.equal(driving(), open_eyes)


# ------------------------------------------------------------------------------ node


def test_motion_options_node_blinks_widget():
    nodes = {n.GET_SCHEMA().node_id: n for n in asyncio.run(asyncio.run(pack.comfy_entrypoint()).get_node_list())}
    node = nodes["DittoMotionOptions"]
    inputs = {i.id: i for i in node.GET_SCHEMA().inputs}
    widget = inputs["blinks"]
    assert f"models/ditto/{CONFIG_DIR}/{CONFIG_FILE}" in widget.tooltip
    defaults = {name: i.default for name, i in inputs.items()}
    gaps = {choice: node.execute(**{**defaults, "blinks": choice})[0].delta_eye_open_n for choice in widget.options}
    assert gaps[widget.default] == 0, "the default is Ditto's: random gaps"
    assert gaps["off"] == -1
    fixed = [gaps[c] for c in widget.options if c.endswith("s apart")]
    assert fixed == sorted(fixed) and len(fixed) == 3 and fixed[0] == 50  # 2 s at 25 fps
