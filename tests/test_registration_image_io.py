"""Source decoding and pixel normalisation: formats, sizes, and the errors for unusable input."""
from __future__ import annotations

import struct
import zlib

import av
import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from ditto_core.errors import InputError
from ditto_core.registration.image_io import (
    check_frame_size, fit_size, load_source, read_image, resize_frames, to_rgb_uint8,
)


def test_fit_size_keeps_aspect_and_even_sides():
    assert fit_size(1432, 1432, 1920) == (1432, 1432)
    assert fit_size(3000, 2000, 1920) == (1920, 1280)
    assert fit_size(1081, 1921, 1920) == (1080, 1920)
    assert fit_size(1001, 801, 1920) == (1000, 800)


def test_gray_rgba_16bit_and_float_become_rgb_uint8():
    gray = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64).astype(np.uint8)
    out = to_rgb_uint8(gray)
    assert out.shape == (1, 64, 64, 3) and out.dtype == torch.uint8
    assert torch.equal(out[0, ..., 0], torch.from_numpy(gray)) and torch.equal(out[..., 0], out[..., 2])

    rgba = np.zeros((2, 64, 64, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[0, ..., 3] = 255  # opaque: the colour itself
    rgba[1, ..., 3] = 0  # transparent: white, whatever colour is stored
    out = to_rgb_uint8(rgba)
    assert out[0, 0, 0].tolist() == [200, 0, 0] and out[1, 0, 0].tolist() == [255, 255, 255]

    deep = np.full((64, 64, 3), 257 * 100, np.uint16)
    deep[0, 0] = 65535
    out = to_rgb_uint8(deep)
    assert out[0, 1, 1].tolist() == [100] * 3 and out[0, 0, 0].tolist() == [255] * 3

    comfy = torch.full((1, 64, 64, 3), 0.5)  # ComfyUI IMAGE: float in [0, 1]
    assert to_rgb_uint8(comfy)[0, 0, 0].tolist() == [128] * 3


@pytest.mark.parametrize("bad, message", [
    (np.zeros((1, 3, 64, 64), np.uint8), "Channels-first data must be permuted"),
    (np.zeros((64, 64, 3), np.int64), "unsupported pixel type"),
    (np.zeros((0, 64, 64, 3), np.uint8), "no frames"),
    ("portrait.jpg", "expected an image array"),
])
def test_unusable_arrays_are_refused(bad, message):
    with pytest.raises(InputError, match=message):
        to_rgb_uint8(bad, "my image")


def test_size_limits():
    with pytest.raises(InputError, match="at least 64 px"):
        check_frame_size(48, 300, "tiny.png")
    with pytest.raises(InputError, match="above the 64 MP limit"):
        check_frame_size(9000, 9000, "huge.png")
    check_frame_size(1080, 1920, "fine.png")
    with pytest.raises(InputError, match="more than 8 times longer one way than the other"):
        check_frame_size(250_000, 64, "strip.png")  # scaled to 1920 px tall it would be 0 px wide


def _png_claiming_size(path, width: int, height: int) -> None:
    """A valid tiny PNG whose header then claims ``width`` x ``height`` (CRC fixed up)."""
    Image.new("RGB", (8, 8)).save(path)
    data = bytearray(path.read_bytes())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    path.write_bytes(bytes(data))


def test_huge_image_refused_before_decoding(tmp_path):
    path = tmp_path / "huge.png"
    _png_claiming_size(path, 9000, 8000)  # decoding would fail: only the header can be what refuses it
    with pytest.raises(InputError, match="huge.png is 9000x8000 pixels"):
        load_source(path)


@pytest.mark.reliability(area="Images", case="a portrait file whose header claims hundreds of megapixels, an SVG "
                         "named .png, or a strip more than 8 times longer than wide",
                         behaviour="refused with the size limit's message, as unreadable, or asking for a crop "
                                   "(they used to end in a traceback)")
def test_a_header_past_pillows_bomb_guard_gets_the_size_limits_error(tmp_path):
    path = tmp_path / "bomb.png"
    _png_claiming_size(path, 20000, 20000)  # 400 MP: Pillow itself refuses to open it
    with pytest.raises(InputError, match="bomb.png declares more pixels than the 64 MP limit"):
        load_source(path)
    with pytest.raises(InputError, match="bomb.png declares more pixels than the 64 MP limit"):
        read_image(path)


def test_file_formats(tmp_path):
    deep = np.full((80, 96), 257 * 40, np.uint16)
    cv2.imwrite(str(tmp_path / "deep.png"), deep)
    frames, is_image = load_source(tmp_path / "deep.png")
    assert is_image and frames.dtype == np.uint16 and to_rgb_uint8(frames)[0, 0, 0].tolist() == [40] * 3

    Image.new("RGBA", (96, 80), (10, 20, 30, 0)).save(tmp_path / "clear.png")
    assert to_rgb_uint8(read_image(tmp_path / "clear.png"))[0, 5, 5].tolist() == [255] * 3

    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display": phone portraits look like this
    Image.new("RGB", (120, 80), (0, 200, 0)).save(tmp_path / "phone.jpg", exif=exif)
    assert read_image(tmp_path / "phone.jpg").shape == (1, 120, 80, 3)


def test_video_source(tmp_path):
    path = tmp_path / "clip.mp4"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=25)
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        for i in range(5):
            frame = av.VideoFrame.from_ndarray(np.full((96, 128, 3), 40 * i, np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    frames, is_image = load_source(path)
    assert not is_image and frames.shape == (5, 96, 128, 3) and frames.dtype == np.uint8
    assert abs(int(frames[3].mean()) - 120) <= 3
    assert load_source(path, max_frames=2)[0].shape[0] == 2


def test_an_animation_ffmpeg_cannot_decode_is_read_by_pillow(tmp_path):
    path = tmp_path / "wave.webp"  # animated WebP: FFmpeg here has no decoder for it
    shades = [Image.new("RGB", (96, 80), (40 * i, 90, 160)) for i in range(4)]
    shades[0].save(path, save_all=True, append_images=shades[1:], duration=40, loop=0, lossless=True)
    frames, is_image = load_source(path)
    assert not is_image and frames.shape == (4, 80, 96, 3) and frames.dtype == np.uint8
    assert [int(f[0, 0, 0]) for f in frames] == [0, 40, 80, 120]
    assert load_source(path, max_frames=2)[0].shape[0] == 2


def test_unreadable_sources(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_source(tmp_path / "missing.jpg")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match="could not be opened as an image or a video"):
        load_source(tmp_path / "notes.txt")
    svg = tmp_path / "drawing.png"  # FFmpeg recognises SVG, but has no decoder for it here
    svg.write_text('<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="64" height="64">'
                   '<rect width="64" height="64" fill="red"/></svg>')
    with pytest.raises(InputError, match="drawing.png could not be opened as an image or a video"):
        load_source(svg)


def test_resize_matches_opencv_bilinear(example_dir):
    image = cv2.cvtColor(cv2.imread(str(example_dir / "portrait.jpg")), cv2.COLOR_BGR2RGB)
    got = resize_frames(torch.from_numpy(image)[None], 700, 700)[0].numpy()
    expected = cv2.resize(image, (700, 700))
    assert np.abs(got.astype(int) - expected).max() <= 1
