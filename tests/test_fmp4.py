"""Fragmented MP4 from x264's access units: what a demuxer reads back is what was encoded."""
from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import pytest
import torch

from ditto_core.live.output_frames import H264Encoder, LiveFrame
from ditto_core.video.fmp4 import FragmentedMP4, annexb_units

av = pytest.importorskip("av")


def _pictures(count: int, height: int = 64, width: int = 96) -> list[torch.Tensor]:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    return [torch.from_numpy(np.roll(base, 3 * i, axis=1).copy()) for i in range(count)]


def _encode(pictures, epochs, fragmented: bool) -> list[bytes]:
    """Each picture through the live stream's encoder (frame i has index i and epoch ``epochs[i]``)."""
    encoder = H264Encoder(*pictures[0].shape[:2], fragmented=fragmented)
    try:
        futures = [encoder.submit(LiveFrame(index=i, pts=i / 25, audio=torch.zeros(640, dtype=torch.int16)), p, e)
                   for i, (p, e) in enumerate(zip(pictures, epochs))]
        return [future.result(timeout=30).packet for future in futures]
    finally:
        encoder.close()


def _decode_stream(data: bytes) -> list:
    with av.open(io.BytesIO(data), format="mp4") as container:
        return [(frame.pts * frame.time_base, frame.to_ndarray(format="rgb24")) for frame in container.decode(video=0)]


def test_fragments_demux_to_the_encoded_pictures_with_their_times():
    pictures = _pictures(30)
    units = _encode(pictures, [0] * 30, fragmented=False)
    fragments = _encode(pictures, [0] * 30, fragmented=True)
    assert fragments[0].startswith(b"\x00\x00\x00\x20ftypisom") and b"avcC" in fragments[0]
    assert all(f[4:8] == b"moof" for f in fragments[1:])  # every later frame: a fragment alone
    decoded = _decode_stream(b"".join(fragments))
    direct = av.CodecContext.create("h264", "r")
    expected = [p.to_ndarray(format="rgb24") for u in units for p in direct.decode(av.Packet(u))]
    expected += [p.to_ndarray(format="rgb24") for p in direct.decode(None)]
    assert len(decoded) == len(expected) == 30
    assert [t for t, _ in decoded] == [Fraction(i, 25) for i in range(30)]
    for (_, got), want in zip(decoded, expected):  # the same bitstream: the same pictures, bit for bit
        np.testing.assert_array_equal(got, want)


def test_a_client_may_drop_frames_before_a_new_epoch_and_still_decode_every_frame_it_gets():
    pictures = _pictures(24)
    epochs = [0] * 10 + [1] * 14
    fragments = _encode(pictures, epochs, fragmented=True)
    kept = fragments[:4] + fragments[10:]  # frames 4-9 were made before a clear() and dropped
    decoded = _decode_stream(b"".join(kept))
    assert [t for t, _ in decoded] == [Fraction(i, 25) for i in [*range(4), *range(10, 24)]]
    # frame 10 stands alone: decoded from its fragment after the init segment, without frames 0-3
    init_end = fragments[0].index(b"moof") - 4
    alone = _decode_stream(fragments[0][:init_end] + b"".join(fragments[10:]))
    for (_, a), (_, b) in zip(alone, decoded[4:]):
        np.testing.assert_array_equal(a, b)


def test_codec_string_comes_from_the_sps():
    fragments = _encode(_pictures(2), [0, 0], fragmented=False)
    sps = next(u for u in annexb_units(fragments[0]) if u[0] & 0x1F == 7)
    mp4 = FragmentedMP4(96, 64, 25)
    mp4.fragment(fragments[0], 0)
    assert mp4.codec == "avc1." + sps[1:4].hex()


def test_a_first_access_unit_without_parameter_sets_is_refused():
    units = _encode(_pictures(2), [0, 0], fragmented=False)
    with pytest.raises(ValueError, match="SPS and PPS"):
        FragmentedMP4(96, 64, 25).fragment(units[1], 1)


def test_an_empty_access_unit_adds_nothing():
    units = _encode(_pictures(2), [0, 0], fragmented=False)
    mp4 = FragmentedMP4(96, 64, 25)
    assert mp4.fragment(b"", 0) == b"" and mp4.codec is None
    first = mp4.fragment(units[0], 0)
    assert mp4.fragment(b"", 1) == b"" and len(_decode_stream(first + mp4.fragment(units[1], 2))) == 2


@pytest.mark.parametrize("code", [b"\x00\x00\x01", b"\x00\x00\x00\x01"])
def test_annexb_units_split_on_both_start_code_lengths(code):
    data = code + b"\x67\x42\x1f" + code + b"\x68\xce" + b"\x00\x00\x00\x01" + b"\x65\x88\x80"
    assert annexb_units(data) == [b"\x67\x42\x1f", b"\x68\xce", b"\x65\x88\x80"]


@pytest.mark.slow
def test_chromium_plays_the_fragments_through_media_source_extensions():
    import base64
    import shutil

    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if shutil.which("/usr/bin/chromium") is None:
        pytest.skip("/usr/bin/chromium is not installed")
    fragments = _encode(_pictures(50, 128, 160), [0] * 20 + [1] * 30, fragmented=True)
    at = fragments[0].index(b"avcC") + 5  # the record's version byte, then profile, constraints, level
    codec = "avc1." + fragments[0][at : at + 3].hex()  # as docs/LIVE.md tells clients to read it
    kept = fragments[:10] + fragments[20:]  # a gap, as a clear() leaves it
    script = """async ([codec, parts]) => {
      const type = `video/mp4; codecs="${codec}"`;
      if (!MediaSource.isTypeSupported(type)) return {unsupported: type};
      const video = document.createElement("video");
      video.muted = true;
      document.body.appendChild(video);
      const source = new MediaSource();
      video.src = URL.createObjectURL(source);
      await new Promise((done) => source.addEventListener("sourceopen", done, {once: true}));
      const buffer = source.addSourceBuffer(type);
      const errors = [];
      buffer.addEventListener("error", () => errors.push("append failed"));
      for (const part of parts) {
        buffer.appendBuffer(Uint8Array.from(atob(part), (c) => c.charCodeAt(0)));
        await new Promise((done) => buffer.addEventListener("updateend", done, {once: true}));
      }
      const ranges = [];
      for (let i = 0; i < buffer.buffered.length; i++) ranges.push([buffer.buffered.start(i), buffer.buffered.end(i)]);
      video.currentTime = 1.0;  // a frame after the gap
      await new Promise((done) => video.addEventListener("seeked", done, {once: true}));
      return {ranges, errors, width: video.videoWidth, height: video.videoHeight, ready: video.readyState,
              error: video.error && video.error.message};
    }"""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = browser.new_page()
            result = page.evaluate(script, [codec, [base64.b64encode(f).decode() for f in kept]])
        finally:
            browser.close()
    if "unsupported" in result:
        pytest.skip(f"this Chromium has no H.264 in MSE: {result['unsupported']}")
    assert result["errors"] == [] and result["error"] is None, result
    assert (result["width"], result["height"]) == (160, 128) and result["ready"] >= 2, result
    # the frames before and after the gap, each range ending one frame after its last frame's time
    assert [[round(t, 2) for t in r] for r in result["ranges"]] == [[0.0, 0.4], [0.8, 2.0]], result
