"""Bad-input matrix, source images and videos: each case ends in a clear InputError or a
documented result, and a refused source leaves no video, temporary file or cache entry.

Face models are ONNX stubs that "find" faces where a test puts them; the extractors are tiny
stand-ins with the official shapes (see tests/hardening_support.py).
"""
from __future__ import annotations

import struct
import warnings
import zlib

import numpy as np
import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.registration import RegistrationOptions, load_source, register_avatar
from ditto_core.registration import registrar
from ditto_core.registration.image_io import MAX_SOURCE_PIXELS
from tests.hardening_support import (  # noqa: F401  (hubert_stub is a fixture)
    assert_no_output, hubert_stub, speech_like, stub_aux, tiny_models, tiny_pipeline, traced_peak, write_png,
    write_video, write_wav,
)

pytestmark = pytest.mark.filterwarnings(  # expected with stub face models; asserted where they matter
    "ignore:Eye measurements use neutral defaults", "ignore:The face in .* is only"
)

SIZE = 320
FACE = (100.0, 80.0, 230.0, 230.0)  # one face well inside a SIZE x SIZE frame
NO_DETECTION = RegistrationOptions(detect_face=False)


def reliability(case: str, behaviour: str):
    return pytest.mark.reliability(area="Images", case=case, behaviour=behaviour)


def portrait(channels: int = 3) -> np.ndarray:
    """A SIZE x SIZE uint8 test card (the stub face models do not look at the pixels)."""
    ramp = np.linspace(0, 255, SIZE, dtype=np.float32)
    planes = [ramp[None, :].repeat(SIZE, 0), ramp[:, None].repeat(SIZE, 1), 255 - ramp[None, :].repeat(SIZE, 0)]
    return np.stack(planes[:channels], -1).round().astype(np.uint8)


@pytest.fixture
def run_pipeline(tmp_path, hubert_stub):
    """``run(source_file, boxes=None)``: the headless pipeline on ``source_file`` with half a
    second of speech, faces at ``boxes`` (None: face detection off). Returns the output folder."""
    speech = write_wav(tmp_path / "speech.wav", speech_like(0.5, 16000), 16000)

    def run(source, boxes=None, options=None):
        aux = stub_aux(tmp_path / "aux", (SIZE, SIZE), boxes) if boxes is not None else None
        pipeline = tiny_pipeline(tmp_path, hubert_stub, *(aux,) if aux else ())
        options = options or (RegistrationOptions() if boxes is not None else NO_DETECTION)
        pipeline.run(source, speech, tmp_path / "out" / "clip.mp4", registration=options)

    return run


def crop_centre(source) -> np.ndarray:
    """Frame pixel at the centre of frame 0's 512 face crop."""
    return (source.M_c2o[0].double() @ torch.tensor([256.0, 256.0, 1.0], dtype=torch.float64))[:2].numpy()


def inside(point: np.ndarray, box) -> bool:
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


def register_file(path, aux=None, options=NO_DETECTION):
    frames, is_image = load_source(path)
    return register_avatar(frames, tiny_models(), aux, options, device="cpu", is_image=is_image, name=path.name)


@reliability("no face", "Refused with 'No face was found in <file>' and what photo to use (or detect_face off "
                        "for a ready crop); no video or cache entry is written.")
def test_no_face(tmp_path, run_pipeline):
    source = write_png(tmp_path / "landscape.png", portrait())
    with pytest.raises(InputError, match=r"No face was found in .*landscape\.png.*frontal.*detect_face=False"):
        run_pipeline(source, boxes=[])
    assert_no_output(tmp_path / "out", tmp_path / "cache")


@reliability("several faces", "The largest face is animated; face_index picks another (numbered left to right), "
                              "and an index past the last face is refused, saying how many faces were found.")
def test_several_faces(tmp_path, run_pipeline):
    small, large = (20.0, 100.0, 100.0, 180.0), (160.0, 60.0, 300.0, 200.0)
    aux = stub_aux(tmp_path / "aux", (SIZE, SIZE), [small, large])
    path = write_png(tmp_path / "group.png", portrait())
    assert inside(crop_centre(register_file(path, aux, RegistrationOptions())), large)
    with pytest.warns(UserWarning, match="only 80 px across"):  # the leftmost face is small: it says so
        leftmost = register_file(path, aux, RegistrationOptions(face_index=0))
    assert inside(crop_centre(leftmost), small)
    with pytest.raises(InputError, match=r"face_index 2 is out of range: 2 face\(s\) were found in .*group\.png"):
        run_pipeline(path, boxes=[small, large], options=RegistrationOptions(face_index=2))
    assert_no_output(tmp_path / "out", tmp_path / "cache")


@reliability("face cut by the border", "Registered, with a warning that the face is cut by the image border and "
                                       "the missing part is filled with black.")
def test_face_cut_by_the_border(tmp_path):
    path = write_png(tmp_path / "cut.png", portrait())
    cut = (200.0, 90.0, 380.0, 250.0)  # reaches 60 px past the right edge
    with pytest.warns(UserWarning, match=r"cut by the image border \(\d+% of its landmarks"):
        source = register_file(path, stub_aux(tmp_path / "cut_aux", (SIZE, SIZE), [cut]), RegistrationOptions())
    assert source.f_s.shape == (1, 32, 16, 64, 64)
    crop_corner = (source.M_c2o[0].double() @ torch.tensor([511.0, 256.0, 1.0], dtype=torch.float64))[0]
    assert crop_corner > SIZE  # the crop does extend past the frame
    with warnings.catch_warnings():  # a face well inside raises no such warning
        warnings.filterwarnings("error", message=".*cut by the image border")
        register_file(path, stub_aux(tmp_path / "whole_aux", (SIZE, SIZE), [FACE]), RegistrationOptions())


@reliability("grayscale", "Accepted: the grey levels are copied to R, G and B.")
def test_grayscale(tmp_path):
    gray = portrait(1)[..., 0]
    source = register_file(write_png(tmp_path / "gray.png", gray), stub_aux(tmp_path / "aux", (SIZE, SIZE), [FACE]),
                           RegistrationOptions())
    assert source.frames.shape == (1, SIZE, SIZE, 3)
    assert all(torch.equal(source.frames[0, ..., c], torch.from_numpy(gray)) for c in range(3))


@reliability("RGBA", "Accepted: transparent pixels are composited over white (not black), so no dark halo "
                     "surrounds the head.")
def test_rgba(tmp_path):
    rgba = np.concatenate([portrait(), np.full((SIZE, SIZE, 1), 255, np.uint8)], -1)
    rgba[:, :SIZE // 2] = (0, 0, 0, 0)  # transparent black, as cut-out tools store it
    rgba[:, SIZE // 2:SIZE // 2 + 10, 3] = 128  # a half-transparent seam
    frames = register_file(write_png(tmp_path / "cutout.png", rgba)).frames[0].numpy()
    assert (frames[:, :SIZE // 2] == 255).all()
    assert np.array_equal(frames[:, SIZE // 2 + 10:], rgba[:, SIZE // 2 + 10:, :3])
    seam = rgba[:, SIZE // 2:SIZE // 2 + 10, :3].astype(np.float64)
    assert np.abs(frames[:, SIZE // 2:SIZE // 2 + 10] - (seam * 128 / 255 + 255 * 127 / 255)).max() <= 1


@reliability("16-bit PNG", "Accepted: grey 16-bit samples are scaled to 8 bits with rounding; 48-bit colour "
                           "keeps each sample's high byte (within one level of exact).")
def test_16_bit_png(tmp_path):
    import cv2

    deep = (np.arange(SIZE * SIZE * 3, dtype=np.int64).reshape(SIZE, SIZE, 3) * 977 % 65536).astype(np.uint16)
    frames = register_file(write_png(tmp_path / "gray16.png", deep[..., 0])).frames[0, ..., 0].numpy()
    assert np.array_equal(frames, np.round(deep[..., 0] / 65535 * 255).astype(np.uint8))
    cv2.imwrite(str(tmp_path / "rgb48.png"), deep[..., ::-1])  # OpenCV writes BGR
    frames = register_file(tmp_path / "rgb48.png").frames[0].numpy().astype(np.int64)
    assert np.abs(frames - deep / 257).max() <= 1


@reliability("1x1", "Refused: the message gives the size and asks for at least 64 px per side (512+ recommended); "
                    "nothing is written.")
def test_one_pixel(tmp_path, run_pipeline):
    path = write_png(tmp_path / "dot.png", np.zeros((1, 1, 3), np.uint8))
    with pytest.raises(InputError, match=r"image dot\.png is only 1x1 pixels.*at least 64 px.*Use a larger image"):
        run_pipeline(path)
    assert_no_output(tmp_path / "out", tmp_path / "cache")
    with pytest.raises(InputError, match="only 1x1 pixels"):  # an in-memory frame (ComfyUI IMAGE) too
        register_avatar(torch.zeros(1, 1, 1, 3), tiny_models(), None, NO_DETECTION, device="cpu")


def png_header_only(path, width: int, height: int):
    """A PNG whose header claims ``width`` x ``height`` and whose pixel data is missing: only
    code that refuses before decoding gets through it without an error about the data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"") + chunk(b"IEND", b""))
    return path


@reliability("8000x8000", "Accepted (64 MP is the limit) and downscaled to max_size, holding at most two decoded "
                          "copies; anything larger is refused from the file header, before decoding.")
def test_8000_by_8000(tmp_path, run_pipeline):
    assert MAX_SOURCE_PIXELS == 8000 * 8000
    with pytest.raises(InputError, match=r"8001x8000 pixels \(64 MP\), above the 64 MP limit\. Downscale it"):
        run_pipeline(png_header_only(tmp_path / "huge.png", 8001, 8000))
    assert_no_output(tmp_path / "out", tmp_path / "cache")

    big = np.zeros((8000, 8000, 3), np.uint8)
    big[::97] = 200  # compressible, yet not flat
    path = write_png(tmp_path / "big.png", big)
    (frames, is_image), decode_peak = traced_peak(lambda: load_source(path))
    assert is_image and frames.shape == (1, 8000, 8000, 3) and np.array_equal(frames[0], big)
    # Pillow's decoded bytes plus the array made from them: bounded, since larger files never decode.
    assert decode_peak < 2.1 * big.nbytes, f"decoding held {decode_peak / big.nbytes:.2f} copies of the image"
    del big
    source = register_avatar(frames, tiny_models(), None, NO_DETECTION, device="cpu")
    assert source.frames.shape == (1, 1920, 1920, 3)


@reliability("corrupt file", "Refused: 'could not be opened as an image or a video' for junk, 'damaged or "
                             "truncated' for a cut-off image, each saying what to do; nothing is written.")
@pytest.mark.parametrize("damage", ["junk", "truncated"])
def test_corrupt_file(tmp_path, run_pipeline, damage):
    import cv2

    ok, jpeg = cv2.imencode(".jpg", portrait())
    if damage == "junk":
        path, expected = tmp_path / "photo.png", r"photo\.png could not be opened as an image or a video.*JPEG/PNG"
        path.write_bytes(b"this is not an image at all\n" * 40)
    else:
        path, expected = tmp_path / "photo.jpg", r"image photo\.jpg could not be decoded.*damaged or truncated"
        path.write_bytes(jpeg.tobytes()[: len(jpeg) // 2])
    with pytest.raises(InputError, match=expected):
        run_pipeline(path)
    assert_no_output(tmp_path / "out", tmp_path / "cache")


@reliability("video source of 1 frame", "Treated as a still portrait (as a one-frame IMAGE is in ComfyUI): the "
                                        "head pose and eyes are animated.")
def test_video_of_one_frame(tmp_path):
    frames, is_image = load_source(write_video(tmp_path / "one.mp4", 1))
    assert is_image and frames.shape == (1, 64, 64, 3)
    source = register_avatar(frames, tiny_models(), None, NO_DETECTION, device="cpu", is_image=is_image)
    assert source.is_image and len(source) == 1


@reliability("multi-page TIFF", "Refused naming the page count and asking for the page as its own image (FFmpeg "
                                "read its first page without a word); a one-page TIFF is an image as any other.")
def test_multi_page_tiff(tmp_path):
    from PIL import Image

    pages = [Image.new("RGB", (64, 80), colour) for colour in ("red", "green", "blue")]
    pages[0].save(tmp_path / "scan.tif", save_all=True, append_images=pages[1:])
    with pytest.raises(InputError, match=r"scan.tif is a TIFF of 3 pages; .*own image"):
        load_source(tmp_path / "scan.tif")
    pages[1].save(tmp_path / "one.tif")
    frames, is_image = load_source(tmp_path / "one.tif")
    assert is_image and frames.shape == (1, 80, 64, 3) and tuple(frames[0, 0, 0]) == (0, 128, 0)


@reliability("video source of 2,000 frames", "Decoded into one array (no second copy); registered when its "
                                              "appearance features (8 MiB per frame in fp32) fit in half the free "
                                              "memory, otherwise refused before any model runs, naming the "
                                              "longest clip that fits.")
def test_video_of_2000_frames(tmp_path, monkeypatch):
    path = write_video(tmp_path / "long.mp4", 2000)
    (frames, is_image), decode_peak = traced_peak(lambda: load_source(path))
    assert not is_image and frames.shape == (2000, 64, 64, 3)
    assert [int(frames[i, 0, 0, 0]) for i in (0, 100, 1999)] == [0, 100, 1999 % 256]
    assert decode_peak < 1.3 * frames.nbytes, f"decoding held {decode_peak / frames.nbytes:.2f} copies of the video"

    models = tiny_models()
    calls = []
    models.appearance_extractor.register_forward_hook(lambda *args: calls.append(1))
    monkeypatch.setattr(registrar, "available_memory", lambda device: 8 << 30)  # an 8 GiB device
    with pytest.raises(InputError, match=r"long\.mp4 has 2000 frames.*15\.6 GiB.*Trim the video to at most 512 "
                                         r"frames \(20\.5 s at 25 fps\)"):
        register_avatar(frames, models, None, NO_DETECTION, device="cpu", is_image=False, name="long.mp4")
    assert calls == []  # refused before any network ran
    monkeypatch.setattr(registrar, "available_memory", lambda device: 40 << 30)
    registrar.check_feature_memory(2000, torch.float32, torch.device("cpu"), "long.mp4")  # fits: no error
