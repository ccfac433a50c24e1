"""The pack's user cache holds compiled code: it is made this user's alone before it is used."""
from __future__ import annotations

import logging
import os
import stat

import pytest

from ditto_core import compilation, user_cache
from ditto_core.aot_packages import AotUnavailable, PackageCache
from ditto_core.errors import DittoError
from ditto_core.render import warp_decode

AREA = "Files and processes"

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="user ids are POSIX")


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "comfyui-ditto"


@pytest.fixture
def another_users(cache_home, monkeypatch):
    """The cache folder exists and belongs to someone else (this process pretends another uid)."""
    cache_home.mkdir(parents=True, mode=0o700)
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)
    return cache_home


def test_the_cache_folder_is_made_private(cache_home):
    assert user_cache.user_cache_dir("inductor") == cache_home / "inductor"
    assert stat.S_IMODE(cache_home.stat().st_mode) == 0o700
    assert not (cache_home / "inductor").exists()  # the kind is its user's to make


def test_an_open_cache_folder_of_ours_is_tightened(cache_home, caplog):
    cache_home.mkdir(parents=True)
    os.chmod(cache_home, 0o777)
    with caplog.at_level(logging.INFO, logger=user_cache.__name__):
        user_cache.user_cache_dir("aot")
    assert stat.S_IMODE(cache_home.stat().st_mode) == 0o700
    assert "mode 777" in caplog.text


@pytest.mark.reliability(area=AREA, case="the cache folder (compiled code) belongs to another user, or cannot be made",
                         behaviour="nothing is loaded from it: Inductor keeps its own default folder, AOT packages "
                                   "are unavailable (torch.compile serves), a direct use names the folder and "
                                   "XDG_CACHE_HOME")
def test_a_cache_folder_of_another_user_is_never_used(another_users, monkeypatch, caplog):
    with pytest.raises(DittoError, match=f"{another_users}.*another user.*XDG_CACHE_HOME"):
        user_cache.user_cache_dir("inductor")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(compilation, "_announced", set())
    with caplog.at_level(logging.WARNING, logger=warp_decode.__name__):
        warp_decode.use_compile_cache()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    assert "its own default folder" in caplog.text and str(another_users) in caplog.text
    with pytest.raises(AotUnavailable, match="another user"):
        PackageCache().root


@pytest.mark.reliability(area=AREA, case="the cache folder lies in a folder other users can write (not sticky)",
                         behaviour="refused naming that folder and XDG_CACHE_HOME (they could swap the cache for "
                                   "one of theirs); under a sticky folder such as /tmp it is used")
def test_a_cache_folder_under_one_others_write_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    (shared / "xdg").mkdir(parents=True)
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared / "xdg"))
    with pytest.raises(DittoError, match=rf"lies in {shared} \(mode 777\).*XDG_CACHE_HOME"):
        user_cache.user_cache_dir("inductor")
    shared.chmod(0o1777)  # sticky: others cannot rename our folder away
    assert user_cache.user_cache_dir("inductor") == shared / "xdg" / "comfyui-ditto" / "inductor"


def test_a_cache_folder_that_cannot_be_made_is_named(cache_home):
    cache_home.parent.mkdir()
    cache_home.write_text("a file where the folder would go")
    with pytest.raises(DittoError, match=f"cannot use the Ditto cache folder {cache_home}.*XDG_CACHE_HOME"):
        user_cache.user_cache_dir("hubert")


def test_an_explicit_compile_cache_is_used_as_given(another_users, tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    warp_decode.use_compile_cache(tmp_path / "mine")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str((tmp_path / "mine").resolve())
