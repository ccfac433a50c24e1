"""What a live stream's client receives: rendered frames sized, copied to the host and encoded.

The render thread scales each stream's frames on the device (:func:`scaled`), converts an H.264
stream's to yuv420p there too (``video.colour.rgb_to_yuv420p``), brings a round's frames to the
host in one transfer per frame shape (:func:`to_host`) and hands each frame to an encoder: JPEG
on a shared pool (:func:`encode_jpeg`), H.264 on one thread per stream (:class:`H264Encoder`,
frames in order; Annex-B access units or fragmented MP4).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import av
import torch
import torch.nn.functional as F
from torch import Tensor

from ..audio.audio_features import FPS
from ..errors import DittoError
from ..video.colour import tag_bt709
from ..video.encoder import rgb_picture, yuv420p_picture
from ..video.fmp4 import FragmentedMP4


@dataclass
class LiveFrame:
    """One output frame of a stream and the speech it shows."""

    index: int  # frame number in the stream, 25 per second
    pts: float  # presentation time in seconds (index / 25)
    audio: Tensor  # (640,) int16: the 16 kHz speech of this frame's 40 ms
    image: Optional[Tensor] = None  # (H, W, 3) uint8 RGB on the host, output "rgb"
    # encoded frame: a JPEG, an H.264 Annex-B access unit (pts = index), or the frame's fragment of a
    # fragmented MP4 (the first frame's bytes start with the init segment)
    packet: Optional[bytes] = None


def encode_jpeg(frame: LiveFrame, image: Tensor, quality: int) -> LiveFrame:
    """``frame`` with ``image`` ((H, W, 3) uint8 RGB on the host) as its JPEG packet."""
    import cv2

    # OpenCV's own RGB -> BGR: a reversed-channel view made imencode copy it first, more slowly than
    # it then encodes (measured: docs/LIVE_LOG.md, session 36).
    bgr = cv2.cvtColor(image.numpy(), cv2.COLOR_RGB2BGR)
    ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise DittoError("JPEG encoding of a live frame failed")
    frame.packet = data.tobytes()
    return frame


class H264Encoder:
    """x264 for one stream (ultrafast, zero latency: one access unit out per frame in, no B-frames),
    on a thread of its own so that frames stay in order.

    Frames are submitted with their stream's epoch (:attr:`RenderJob.epoch`, raised by each
    ``clear()``): the first frame of a new epoch is encoded as an IDR picture, because frames of the
    epoch before may be dropped after encoding and the client's decoder must not get a frame that
    refers to pictures it was never sent.
    """

    def __init__(self, height: int, width: int, fragmented: bool = False) -> None:
        # fragmented: each frame's bytes are an MP4 fragment (the first after the init segment)
        self._mp4 = FragmentedMP4(width, height, FPS) if fragmented else None
        self._codec = av.CodecContext.create("libx264", "w")
        self._codec.width, self._codec.height, self._codec.pix_fmt = width, height, "yuv420p"
        tag_bt709(self._codec)  # as the pictures are converted, and as the MP4s are: the decoder is told
        self._reformatter = av.video.reformatter.VideoReformatter()  # RGB pictures, on this encoder's thread
        self._codec.time_base = Fraction(1, FPS)
        # forced-idr: a picture marked I restarts the stream (IDR) rather than being a plain I picture.
        self._codec.options = {"preset": "ultrafast", "tune": "zerolatency", "g": str(2 * FPS), "forced-idr": "1"}
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="ditto-live-h264")
        self._lock = threading.Lock()  # the render thread submits while the server's loop may close
        self._closed = False
        self._epoch: Optional[int] = None

    def submit(self, frame: LiveFrame, image: Tensor, epoch: int):
        """The future of ``frame`` encoded; None once the encoder is closed (its stream is gone)."""
        with self._lock:
            if self._closed:
                return None
            keyframe, self._epoch = epoch != self._epoch, epoch
            return self._thread.submit(self._encode, frame, image, keyframe)

    def _encode(self, frame: LiveFrame, image: Tensor, keyframe: bool) -> LiveFrame:
        """``image``: (H * 3 // 2, W) packed yuv420p (converted on the device) or (H, W, 3) RGB."""
        pixels = image.numpy()
        picture = yuv420p_picture(pixels) if pixels.ndim == 2 else rgb_picture(self._reformatter, pixels)
        picture.pts = frame.index
        if keyframe:
            picture.pict_type = av.video.frame.PictureType.I
        frame.packet = b"".join(bytes(packet) for packet in self._codec.encode(picture))
        if self._mp4 is not None:
            frame.packet = self._mp4.fragment(frame.packet, frame.index)
        return frame

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._thread.shutdown(wait=False, cancel_futures=True)


def output_size(height: int, width: int, max_size: Optional[int]) -> tuple[int, int]:
    """(H, W) scaled down so that the longer side is at most ``max_size`` (unchanged if it already is)."""
    if max_size is None or max(height, width) <= max_size:
        return height, width
    scale = max_size / max(height, width)
    return max(1, round(height * scale)), max(1, round(width * scale))


def to_host(frames: list[Tensor]) -> list[Tensor]:
    """Each job's frames on the host, copied by one transfer per frame shape: the render
    thread waits for the device once a round, not once a job (with a wait per job the GPU idles
    between jobs while the thread gets its turn for the GIL back)."""
    out: list[Optional[Tensor]] = [None] * len(frames)
    sizes: dict[tuple[int, ...], list[int]] = {}
    for index, images in enumerate(frames):
        sizes.setdefault(tuple(images.shape[1:]), []).append(index)
    for indices in sizes.values():
        host = torch.cat([frames[i] for i in indices]).cpu()
        for i, part in zip(indices, host.split([frames[i].shape[0] for i in indices])):
            out[i] = part
    return out


def scaled(frames: Tensor, size: tuple[int, int]) -> Tensor:
    """(k, H, W, 3) uint8 -> (k, *size, 3) uint8, scaled on the device."""
    height, width = frames.shape[1:3]
    if size == (height, width):
        return frames
    images = frames.permute(0, 3, 1, 2).float()
    images = F.interpolate(images, size=size, mode="bilinear", antialias=True, align_corners=False)
    return images.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
