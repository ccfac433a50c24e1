"""AvatarCache: keys, round trip, damaged entries and atomic writes."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from ditto_core import atomic_files
from ditto_core.atomic_files import DiskFullError
from ditto_core.registration.cache import AvatarCache, cache_key, tree_sha256

FRAMES = np.random.default_rng(0).integers(0, 256, (1, 64, 48, 3), dtype=np.uint8)
SETTINGS = {"crop_scale": 2.3, "smo_k_s": 13, "dtype": "torch.float32"}


def _tensors():
    g = torch.Generator().manual_seed(0)
    return {"f_s": torch.randn(1, 32, 16, 8, 8, generator=g).half(), "M_c2o": torch.randn(1, 3, 3, generator=g)}


@pytest.fixture
def stored(tmp_path):
    cache = AvatarCache(tmp_path / "avatars")
    key = cache_key(FRAMES, SETTINGS, "models-a")
    cache.store(key, _tensors(), {"is_image": True})
    return cache, key


def test_key_covers_pixels_shape_settings_and_models():
    key = cache_key(FRAMES, SETTINGS, "models-a")
    assert key == cache_key(FRAMES.copy(), dict(reversed(SETTINGS.items())), "models-a")  # stable, order-free
    changed = FRAMES.copy()
    changed[0, 0, 0, 0] ^= 1
    others = {
        cache_key(changed, SETTINGS, "models-a"),
        cache_key(FRAMES.reshape(1, 48, 64, 3), SETTINGS, "models-a"),
        cache_key(FRAMES, {**SETTINGS, "crop_scale": 2.4}, "models-a"),
        cache_key(FRAMES, SETTINGS, "models-b"),
    }
    assert key not in others and len(others) == 4


def test_round_trip(stored):
    cache, key = stored
    tensors, meta = cache.load(key)
    for name, value in _tensors().items():
        assert torch.equal(tensors[name], value) and tensors[name].dtype == value.dtype
    assert meta["is_image"] is True and meta["key"] == key and meta["shapes"]["f_s"] == [1, 32, 16, 8, 8]
    assert [p.name for p in cache.root.iterdir()] == [key] and cache.keys() == [key]
    assert sorted(p.name for p in cache.entry_dir(key).iterdir()) == ["entry.json", "tensors.safetensors"]


def test_miss_is_silent(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert AvatarCache(tmp_path).load("0" * 64) is None


def _damage_truncate(cache, key):
    path = cache.paths(key)[0]
    path.write_bytes(path.read_bytes()[:-100])


def _damage_flip(cache, key):
    path = cache.paths(key)[0]
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # same size, one tensor value changed
    path.write_bytes(bytes(data))


def _damage_json(cache, key):
    cache.paths(key)[1].write_text('{"format": "ditto-avatar", "key": ')


def _damage_other_entry(cache, key):
    other = cache_key(FRAMES, SETTINGS, "models-b")
    cache.store(other, _tensors(), {})
    os.replace(cache.paths(other)[1], cache.paths(key)[1])  # metadata of another entry under this key


@pytest.mark.reliability(area="Safety", case="tampered, truncated or mismatched avatar cache entry",
                         behaviour="verified by tree hash and shapes before use: treated as a miss with one warning, recomputed and overwritten")
@pytest.mark.parametrize("damage", [_damage_truncate, _damage_flip, _damage_json, _damage_other_entry])
def test_damaged_entry_warns_once_then_is_overwritten(stored, damage):
    cache, key = stored
    damage(cache, key)
    with pytest.warns(RuntimeWarning, match="damaged") as record:
        assert cache.load(key) is None
    assert len(record) == 1
    cache.store(key, _tensors(), {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(cache.load(key)[0]["M_c2o"], _tensors()["M_c2o"])


def test_entry_from_another_version_is_a_silent_miss(stored):
    cache, key = stored
    meta_path = cache.paths(key)[1]
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "version": 0}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.load(key) is None


@pytest.mark.reliability(area="Safety", case="avatar cache write interrupted (disk full) writing either file or "
                                             "at the entry's rename",
                         behaviour="DiskFullError naming the cache folder and the space the entry needs; no visible "
                                   "entry and no temporary left; the next load is a clean miss")
@pytest.mark.parametrize("fail_on", ["tensors.safetensors", "entry.json", "rename"])
def test_interrupted_write_leaves_no_visible_entry(tmp_path, monkeypatch, fail_on):
    cache = AvatarCache(tmp_path)
    key = cache_key(FRAMES, SETTINGS, "m")
    real_write, real_rename = Path.write_bytes, os.rename

    def full_disk(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    if fail_on == "rename":
        monkeypatch.setattr(atomic_files.os, "rename", lambda src, dst: full_disk() if Path(dst).name == key
                            else real_rename(src, dst))
    else:
        monkeypatch.setattr(Path, "write_bytes", lambda path, data: full_disk() if path.name == fail_on
                            else real_write(path, data))
    with pytest.raises(DiskFullError) as caught:
        cache.store(key, _tensors(), {})
    monkeypatch.undo()
    assert str(tmp_path) in str(caught.value) and caught.value.needed > 0
    assert list(tmp_path.iterdir()) == []  # no entry, no temporary folder
    assert cache.load(key) is None and cache.keys() == []


def test_legacy_entry_files_are_replaced_by_the_folder(tmp_path):
    cache = AvatarCache(tmp_path)
    key = cache_key(FRAMES, SETTINGS, "m")
    (tmp_path / f"{key}.safetensors").write_bytes(b"version 2")
    (tmp_path / f"{key}.json").write_text("{}")
    assert cache.load(key) is None
    cache.store(key, _tensors(), {})
    assert [p.name for p in tmp_path.iterdir()] == [key]


@pytest.mark.reliability(area="Safety", case="avatar cache key that is a path (../../etc/passwd)",
                         behaviour="ValueError; keys must be 64 hex digits, so no file outside the cache root is touched")
def test_keys_cannot_escape_the_root(tmp_path):
    with pytest.raises(ValueError, match="invalid avatar cache key"):
        AvatarCache(tmp_path).paths("../../etc/passwd")


def test_tree_hash_detects_any_change_and_records_plain_sha256(stored):
    data = np.random.default_rng(1).integers(0, 256, 3 * (1 << 20) + 5, dtype=np.uint8)
    digest = tree_sha256(data)
    assert digest == tree_sha256(data.tobytes()) and len(digest) == 64
    for index in (0, (1 << 20) + 7, len(data) - 1):
        changed = data.copy()
        changed[index] ^= 1
        assert tree_sha256(changed) != digest
    assert tree_sha256(data[:-1]) != digest
    cache, key = stored
    meta = json.loads(cache.paths(key)[1].read_text())
    assert meta["sha256"] == hashlib.sha256(cache.paths(key)[0].read_bytes()).hexdigest()
