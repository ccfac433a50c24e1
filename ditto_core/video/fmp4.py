"""H.264 access units -> fragmented MP4 (ISO/IEC 14496-12 and -15), one fragment per frame.

What Media Source Extensions, ffmpeg and GStreamer read from a live byte stream: an init segment
(``ftyp`` + ``moov`` with the ``avc1`` sample entry and its ``avcC``, no samples) and then one
``moof`` + ``mdat`` per frame, each standing alone (its decode time in ``tfdt``, its data offset
counted from its own ``moof``), so a client may join the byte stream at the init segment and
concatenate whatever fragments follow. The parameter sets live in the ``avcC`` (``avc1``), so
they are taken out of the samples; samples are length-prefixed NAL units (4-byte lengths).
"""
from __future__ import annotations

import struct
from typing import Optional

NAL_IDR, NAL_SPS, NAL_PPS, NAL_AUD = 5, 7, 8, 9
TICKS_PER_FRAME = 512  # ffmpeg's choice: 25 fps -> a timescale of 12800
SYNC_SAMPLE = 0x02000000  # sample_depends_on = 2 (an I picture)
DELTA_SAMPLE = 0x01010000  # sample_depends_on = 1, sample_is_non_sync_sample = 1
UNITY_MATRIX = struct.pack(">9i", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)


def annexb_units(data: bytes) -> list[bytes]:
    """The NAL units of an Annex-B byte string (3- or 4-byte start codes), without their start codes."""
    starts, i = [], data.find(b"\x00\x00\x01")
    while i >= 0:
        starts.append(i + 3)
        i = data.find(b"\x00\x00\x01", i + 3)
    units = []
    for k, start in enumerate(starts):
        end = starts[k + 1] - 3 if k + 1 < len(starts) else len(data)
        unit = data[start:end]
        units.append(unit[:-1] if k + 1 < len(starts) and unit.endswith(b"\x00") else unit)  # 4-byte code's zero
    return [u for u in units if u]


def _box(kind: bytes, *payload: bytes) -> bytes:
    body = b"".join(payload)
    return struct.pack(">I4s", 8 + len(body), kind) + body


def _full_box(kind: bytes, version: int, flags: int, *payload: bytes) -> bytes:
    return _box(kind, struct.pack(">I", version << 24 | flags), *payload)


def avc_decoder_configuration(sps: bytes, pps: bytes) -> bytes:
    """The ``avcC`` record (14496-15, 5.3.3.1) for one SPS and one PPS."""
    profile = sps[1]
    record = struct.pack(">BBBBBB", 1, profile, sps[2], sps[3], 0xFF, 0xE1)  # 4-byte lengths, 1 SPS
    record += struct.pack(">H", len(sps)) + sps + struct.pack(">BH", 1, len(pps)) + pps
    if profile in (100, 110, 122, 144):  # the high profiles carry chroma format and bit depths
        record += bytes((0xFC | 1, 0xF8, 0xF8, 0))  # 4:2:0, 8-bit luma and chroma, no SPS extensions
    return record


class FragmentedMP4:
    """One video track: :meth:`fragment` turns each access unit into its bytes of the stream.

    The first access unit must be an IDR picture with its SPS and PPS in band (x264's does): the
    init segment is made from them and comes before the first fragment. A later SPS or PPS is
    ignored (one encoder, one configuration). Frame ``index`` gives the decode time, so frames a
    caller drops leave a gap in time; the frame after such a gap must be an IDR picture.
    """

    def __init__(self, width: int, height: int, fps: int) -> None:
        self.width, self.height = width, height
        self.timescale = fps * TICKS_PER_FRAME
        self.codec: Optional[str] = None  # "avc1.PPCCLL" once the first access unit is in
        self._sequence = 0

    def fragment(self, access_unit: bytes, index: int) -> bytes:
        """The bytes for frame ``index`` (Annex-B ``access_unit``): init segment first, the first time."""
        units = annexb_units(access_unit)
        if not units:
            return b""
        head = b""
        if self.codec is None:
            sps = next((u for u in units if u[0] & 0x1F == NAL_SPS), None)
            pps = next((u for u in units if u[0] & 0x1F == NAL_PPS), None)
            if sps is None or pps is None or len(sps) < 4:
                raise ValueError("the first H.264 access unit of a fragmented MP4 needs its SPS and PPS")
            self.codec = "avc1." + sps[1:4].hex()
            head = self._init_segment(sps, pps)
        samples = [u for u in units if u[0] & 0x1F not in (NAL_SPS, NAL_PPS, NAL_AUD)]
        if not samples:  # an encoder that held the frame back: nothing to play yet
            return head
        sync = any(u[0] & 0x1F == NAL_IDR for u in samples)
        data = b"".join(struct.pack(">I", len(u)) + u for u in samples)
        self._sequence += 1
        return head + self._fragment(data, index * TICKS_PER_FRAME, sync)

    def _init_segment(self, sps: bytes, pps: bytes) -> bytes:
        ftyp = _box(b"ftyp", b"isom", struct.pack(">I", 0x200), b"isom", b"iso6", b"avc1", b"mp41")
        mvhd = _full_box(b"mvhd", 0, 0, struct.pack(">IIIIIH10x", 0, 0, self.timescale, 0, 0x10000, 0x100),
                         UNITY_MATRIX, bytes(24), struct.pack(">I", 2))
        tkhd = _full_box(b"tkhd", 0, 3, struct.pack(">IIII4x8xhhh2x", 0, 0, 1, 0, 0, 0, 0), UNITY_MATRIX,
                         struct.pack(">II", self.width << 16, self.height << 16))
        mdhd = _full_box(b"mdhd", 0, 0, struct.pack(">IIIIHH", 0, 0, self.timescale, 0, 0x55C4, 0))  # 'und'
        hdlr = _full_box(b"hdlr", 0, 0, struct.pack(">I4s12x", 0, b"vide"), b"VideoHandler\x00")
        avc1 = _box(b"avc1", bytes(6), struct.pack(">H16xHHIIIH32xHh", 1, self.width, self.height,
                                                   0x480000, 0x480000, 0, 1, 0x18, -1),
                    _box(b"avcC", avc_decoder_configuration(sps, pps)))
        stbl = _box(b"stbl", _full_box(b"stsd", 0, 0, struct.pack(">I", 1), avc1),
                    *(_full_box(kind, 0, 0, bytes(4)) for kind in (b"stts", b"stsc", b"stco")),
                    _full_box(b"stsz", 0, 0, bytes(8)))
        dinf = _box(b"dinf", _full_box(b"dref", 0, 0, struct.pack(">I", 1), _full_box(b"url ", 0, 1)))
        minf = _box(b"minf", _full_box(b"vmhd", 0, 1, bytes(8)), dinf, stbl)
        trak = _box(b"trak", tkhd, _box(b"mdia", mdhd, hdlr, minf))
        mvex = _box(b"mvex", _full_box(b"trex", 0, 0, struct.pack(">IIIII", 1, 1, 0, 0, 0)))
        return ftyp + _box(b"moov", mvhd, trak, mvex)

    def _fragment(self, data: bytes, decode_time: int, sync: bool) -> bytes:
        def moof(data_offset: int) -> bytes:
            tfhd = _full_box(b"tfhd", 0, 0x020000, struct.pack(">I", 1))  # default-base-is-moof, track 1
            tfdt = _full_box(b"tfdt", 1, 0, struct.pack(">Q", decode_time))
            # data offset, then each sample's duration, size and flags (one sample)
            trun = _full_box(b"trun", 0, 0x000701, struct.pack(">IiIII", 1, data_offset, TICKS_PER_FRAME,
                                                                len(data), SYNC_SAMPLE if sync else DELTA_SAMPLE))
            return _box(b"moof", _full_box(b"mfhd", 0, 0, struct.pack(">I", self._sequence)), _box(b"traf", tfhd, tfdt, trun))

        size = len(moof(0))  # the offset's value does not change the box's size
        return moof(size + 8) + _box(b"mdat", data)
