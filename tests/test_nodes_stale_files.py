"""The node pack at load removes what Ditto runs killed mid-write left in ComfyUI's folders."""
from __future__ import annotations

import asyncio

import pytest

from tests.comfy_stubs import load_pack
from tests.process_support import LiveTemp, stale_temp

pack = load_pack()

import comfy.model_management  # noqa: E402,F401  (the stand-ins, or ComfyUI itself, once the pack is loaded)
import folder_paths  # noqa: E402


@pytest.fixture
def comfy_folders(tmp_path):
    """ComfyUI's output, temp and user folders moved under ``tmp_path`` for one test."""
    before = (folder_paths.get_output_directory(), folder_paths.get_temp_directory(),
              folder_paths.get_user_directory())
    folders = {name: tmp_path / name for name in ("output", "temp", "user")}
    for folder in folders.values():
        folder.mkdir()
    folder_paths.set_output_directory(str(folders["output"]))
    folder_paths.set_temp_directory(str(folders["temp"]))
    folder_paths.set_user_directory(str(folders["user"]))
    yield folders
    for setter, value in zip((folder_paths.set_output_directory, folder_paths.set_temp_directory,
                              folder_paths.set_user_directory), before):
        setter(value)


@pytest.mark.reliability(area="Files and processes", case="ComfyUI restarted after being killed mid-save (partial MP4 "
                                                          "in output/ or a subfolder, a half-written cache entry)",
                         behaviour="the pack removes dead processes' temporaries at load; those of a live second "
                                   "ComfyUI sharing the folders, and every other file, stay")
def test_pack_load_reaps_dead_processes_temporaries(comfy_folders):
    output, temp = comfy_folders["output"], comfy_folders["temp"]
    cache = comfy_folders["user"] / "ditto_avatar_cache"
    (output / "videos").mkdir()
    cache.mkdir()
    finished = output / "videos" / "ditto_00001_.mp4"
    finished.write_bytes(b"a finished video")
    stale = [stale_temp(output, "ditto_00002_.mp4"), stale_temp(output / "videos", "ditto_00002_.mp4"),
             stale_temp(temp, "preview.mp4"), stale_temp(cache, "0" * 64, suffix="")]
    with LiveTemp(output / "videos" / "ditto_00003_.mp4") as live:
        asyncio.run(asyncio.run(pack.comfy_entrypoint()).on_load())
        assert [path for path in stale if path.exists()] == []
        assert live.path.exists() and finished.read_bytes() == b"a finished video"
