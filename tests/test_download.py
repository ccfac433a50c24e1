"""The downloader against a HuggingFace-like server on 127.0.0.1: what it fetches, how it resumes,
what it refuses, and that a target only ever appears whole and verified."""
from pathlib import Path

import pytest

from ditto_core.__main__ import main
from ditto_core.download import download_missing
from ditto_core.errors import CheckpointError, MissingModelError
from ditto_core.model_files import missing_downloads
from tests.fake_hub import fake_hub, linked_networks  # noqa: F401 (fixture)

STITCH = "ditto_pytorch/models/stitch_network.pth"


def _dot_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*"))


@pytest.fixture
def model_dir(tmp_path, official_ckpt_dir):
    return linked_networks(tmp_path / "ditto", official_ckpt_dir)


def test_fetches_every_missing_file_once(fake_hub, model_dir):
    wanted = missing_downloads(model_dir)
    assert len(wanted) == 7  # the stitching network, five face/audio models, the config
    done = []
    written = download_missing(model_dir, progress=lambda i, n: done.append((i, n)))
    assert sorted(written) == sorted(wanted.values()) and done[-1] == (7, 7)
    for remote, target in wanted.items():
        assert target.read_bytes() == fake_hub.files[remote], target
    assert _dot_files(model_dir) == []
    assert download_missing(model_dir) == [] and len(fake_hub.served) == 7, "nothing is fetched twice"


@pytest.mark.reliability(area="Models", case="download interrupted mid-file (connection lost)",
                         behaviour="MissingModelError naming the file and saying the next run resumes; the part "
                                   "received is kept beside the target, which does not exist; the next run asks "
                                   "only for the rest, and the file is whole and verified")
def test_interrupted_download_resumes_from_the_part(fake_hub, model_dir):
    fake_hub.cut_after["stitch_network.pth"] = 300_000
    with pytest.raises(MissingModelError, match=r"stitch_network\.pth.*300000 bytes were kept.*resumes"):
        download_missing(model_dir)
    part = model_dir / ".stitch_network.pth.part"
    assert part.stat().st_size == 300_000 and not (model_dir / "stitch_network.pth").exists()
    fake_hub.cut_after.clear()
    download_missing(model_dir)
    assert ("stitch_network.pth", 300_000) in fake_hub.served, "the retry did not resume"
    assert (model_dir / "stitch_network.pth").read_bytes() == fake_hub.files[STITCH] and not part.exists()


def _flip_a_byte(data: bytes) -> bytes:
    return data[:1000] + bytes([data[1000] ^ 0xFF]) + data[1001:]


def test_a_stale_part_that_is_not_this_file_is_replaced(fake_hub, model_dir):
    part = model_dir / ".stitch_network.pth.part"
    part.write_bytes(b"\0" * (len(fake_hub.files[STITCH]) + 10))  # longer than the file: not a prefix of it
    download_missing(model_dir)
    assert (model_dir / "stitch_network.pth").read_bytes() == fake_hub.files[STITCH]
    assert ("stitch_network.pth", 0) in fake_hub.served


def test_a_corrupted_transfer_is_deleted_part_and_all(fake_hub, model_dir):
    fake_hub.damage["stitch_network.pth"] = _flip_a_byte  # same size, and it would still load
    with pytest.raises(CheckpointError, match=r"stitch_network\.pth.*SHA-256"):
        download_missing(model_dir)
    assert not (model_dir / "stitch_network.pth").exists() and _dot_files(model_dir) == []


def test_a_file_without_lfs_headers_is_checked_by_size_and_kind(fake_hub, model_dir):
    config = "v0.4_hubert_cfg_pytorch.pkl"
    fake_hub.plain.add(config)
    fake_hub.damage[config] = lambda data: data[:-1]  # the size the server lists is the whole file's
    with pytest.raises(CheckpointError, match=rf"{config}.* bytes, the Hub lists"):
        download_missing(model_dir)
    fake_hub.damage.clear()
    download_missing(model_dir)
    assert (model_dir / "ditto_cfg" / config).read_bytes() == fake_hub.files[f"ditto_cfg/{config}"]


def test_missing_file_on_the_server_names_it_and_the_status(fake_hub, model_dir):
    del fake_hub.files[STITCH]
    with pytest.raises(MissingModelError, match=r"stitch_network\.pth.*HTTP 404"):
        download_missing(model_dir)


def test_cli_download(fake_hub, model_dir, capsys):
    assert main(["download", "--models", str(model_dir)]) == 0
    out = capsys.readouterr()
    assert "stitch_network.pth" in out.out and str(model_dir / "aux_models") in out.out
    assert missing_downloads(model_dir) == {}
    assert main(["download", "--models", str(model_dir)]) == 0
    assert "nothing to download" in capsys.readouterr().out


def test_cli_download_unreachable_is_one_line(model_dir, capsys):
    code = main(["download", "--models", str(model_dir), "--endpoint", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: downloading ") and "Traceback" not in err
