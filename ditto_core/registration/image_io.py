"""Source frames: decode files, normalise any pixel format to RGB uint8, fit ``max_size``.

Everything downstream expects ``(N, H, W, 3)`` uint8 RGB with even ``H`` and ``W`` (the video
encoder needs even sizes). Users hand us grayscale scans, RGBA PNGs, 16-bit TIFFs, ComfyUI
float images and phone photos with EXIF rotation; all of them are converted here, and
anything that cannot work is refused with a message that says what to do.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputError

ArrayLike = Union[Tensor, np.ndarray]

MAX_SOURCE_PIXELS = 8000 * 8000
"""Frames above this are refused (before decoding when read from a file): nothing is gained
over ``max_size`` and decoding alone could take gigabytes."""
MIN_SOURCE_SIDE = 64
"""Below this no face detector or crop can produce a usable portrait."""
MAX_ASPECT = 8
"""Longest side over shortest: a longer strip, scaled to the 1920 px frame rule, has no face's room."""
_RESIZE_CHUNK = 8  # frames resized per batch: bounds the float32 copy of a long 4K video


def fit_size(height: int, width: int, max_size: int) -> tuple[int, int]:
    """Ditto's frame size rule: longer side down to ``max_size`` (aspect kept, rounded), then
    each side floored to an even number."""
    if max(height, width) > max_size:
        if height > width:
            height, width = max_size, int(round(width * max_size / height))
        else:
            height, width = int(round(height * max_size / width)), max_size
    return height - height % 2, width - width % 2


def to_rgb_uint8(frames: ArrayLike, name: str = "source image") -> Tensor:
    """Any common pixel layout -> ``(N, H, W, 3)`` uint8 RGB tensor on the input's device.

    Accepts ``(H, W)``, ``(H, W, C)`` or ``(N, H, W, C)`` channels-last with C = 1 (gray),
    2 (gray + alpha), 3 (RGB) or 4 (RGBA); dtypes uint8, uint16 or int32 (16-bit samples,
    scaled to 8 bits) or float in [0, 1] (ComfyUI IMAGE). Transparent pixels are composited over white: their stored
    colour is arbitrary (often black) and would otherwise surround the face with a dark halo.
    """
    if isinstance(frames, np.ndarray):
        if frames.dtype == np.uint16:  # torch has few uint16 kernels; widen on the host
            frames = frames.astype(np.int32)
        if not frames.flags.writeable:  # torch cannot wrap read-only memory (e.g. decoder buffers)
            frames = frames.copy()
        frames = torch.from_numpy(np.ascontiguousarray(frames))
    if not isinstance(frames, Tensor):
        raise InputError(f"{name}: expected an image array or tensor, got {type(frames).__name__}.")
    if frames.ndim == 2:
        frames = frames[..., None]
    if frames.ndim == 3:
        frames = frames[None]
    if frames.ndim != 4 or frames.shape[-1] not in (1, 2, 3, 4):
        raise InputError(
            f"{name}: expected channels-last pixels shaped (H, W), (H, W, C) or (N, H, W, C) with C in "
            f"1..4, got shape {tuple(frames.shape)}. Channels-first data must be permuted to (N, H, W, C)."
        )
    if frames.shape[0] == 0:
        raise InputError(f"{name}: no frames were given.")
    pixels = _to_unit_float(frames, name) if frames.dtype != torch.uint8 else None
    channels = frames.shape[-1]
    if channels in (2, 4):
        pixels = frames.float() / 255 if pixels is None else pixels
        color, alpha = pixels[..., :-1], pixels[..., -1:]
        pixels = color * alpha + (1 - alpha)
    if pixels is not None:
        frames = (pixels * 255).round_().clamp_(0, 255).to(torch.uint8)
    if frames.shape[-1] == 1:
        frames = frames.expand(*frames.shape[:-1], 3)
    return frames.contiguous()


def _to_unit_float(frames: Tensor, name: str) -> Tensor:
    if frames.dtype in (torch.uint16, torch.int32):
        # 16-bit sources (PNG/TIFF) arrive as uint16, or widened to int32 by the host path.
        return frames.float().clamp_(0, 65535) / 65535
    if frames.is_floating_point():
        return frames.float().clamp(0, 1)
    raise InputError(
        f"{name}: unsupported pixel type {frames.dtype}; use uint8, 16-bit or float pixels in [0, 1]."
    )


def check_frame_size(height: int, width: int, name: str) -> None:
    """Refuse frames that are too large to process sensibly or too small to hold a face."""
    if height * width > MAX_SOURCE_PIXELS:
        raise InputError(
            f"{name} is {width}x{height} pixels ({height * width / 1e6:.0f} MP), above the "
            f"{MAX_SOURCE_PIXELS / 1e6:.0f} MP limit. Downscale it (a 1920 px side is plenty) and try again."
        )
    if min(height, width) < MIN_SOURCE_SIDE:
        raise InputError(
            f"{name} is only {width}x{height} pixels; a face needs at least {MIN_SOURCE_SIDE} px on each side "
            f"(512 px or more gives good results). Use a larger image."
        )
    if max(height, width) > MAX_ASPECT * min(height, width):
        raise InputError(
            f"{name} is {width}x{height} pixels, more than {MAX_ASPECT} times longer one way than the other; "
            "crop it around the face."
        )


def resize_frames(frames: Tensor, height: int, width: int) -> Tensor:
    """Bilinear resize of ``(N, H, W, 3)`` uint8 frames, as OpenCV's default ``INTER_LINEAR``.

    Runs in chunks on the frames' device so a long high-resolution video never needs a full
    float copy.
    """
    if frames.shape[1:3] == (height, width):
        return frames
    out = torch.empty((frames.shape[0], height, width, 3), dtype=torch.uint8, device=frames.device)
    for start in range(0, frames.shape[0], _RESIZE_CHUNK):
        chunk = frames[start:start + _RESIZE_CHUNK].permute(0, 3, 1, 2).float()
        chunk = F.interpolate(chunk, size=(height, width), mode="bilinear", align_corners=False, antialias=False)
        out[start:start + _RESIZE_CHUNK] = chunk.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    return out


def _opened(Image, path: Path):
    """``Image.open(path)``, with Pillow's refusal of a header declaring hundreds of megapixels
    (its decompression-bomb guard) turned into the size limit's own error."""
    try:
        return Image.open(path)
    except Image.DecompressionBombError as exc:
        raise InputError(f"image {path.name} declares more pixels than the {MAX_SOURCE_PIXELS / 1e6:.0f} MP limit "
                         f"({exc}). Downscale it (a 1920 px side is plenty) and try again.") from None


def read_image(path: Path | str) -> np.ndarray:
    """Decode an image file to ``(1, H, W, C)`` (uint8/uint16, C in 1..4) with EXIF rotation applied.

    The size is checked from the header first, so an oversized file is refused undecoded.
    16-bit colour (48/64-bit PNG) reaches us as 8-bit: Pillow keeps each sample's high byte.
    """
    from PIL import Image, ImageOps

    path = Path(path)
    try:
        with _opened(Image, path) as img:
            check_frame_size(img.height, img.width, f"image {path.name}")
            img = ImageOps.exif_transpose(img)
            if img.mode in ("I;16", "I;16L", "I;16B", "I"):
                pixels = np.asarray(img).astype(np.int64).clip(0, 65535).astype(np.uint16)
            elif img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
                pixels = np.asarray(img.convert("RGBA"))
            elif img.mode == "L":
                pixels = np.asarray(img)
            else:
                pixels = np.asarray(img.convert("RGB"))
    except InputError:
        raise
    except (OSError, SyntaxError, ValueError) as exc:  # what Pillow raises for damaged data
        raise InputError(f"image {path.name} could not be decoded ({exc}): the file is damaged or truncated. "
                         f"Open and re-save it (PNG or JPEG), or export it again.") from exc
    return pixels.reshape(1, *pixels.shape[:2], -1)


def read_video(path: Path | str, max_frames: Optional[int] = None) -> np.ndarray:
    """Decode a video file's first video stream to ``(N, H, W, 3)`` uint8 RGB with PyAV.

    Frames are decoded into one array sized from the container's frame count, so a long video
    needs its decoded size in memory once, not twice (a list of frames plus their stack).
    """
    import av

    path = Path(path)
    unreadable = (f"{path.name} could not be opened as an image or a video{{}}. "
                  f"Use a JPEG/PNG/WebP image or an MP4/MOV/WebM video.")
    try:
        container = av.open(str(path))
    except av.error.FFmpegError as exc:
        raise InputError(unreadable.format(f" ({exc})")) from exc
    with container:
        if not container.streams.video:
            raise InputError(f"{path.name} has no video stream. Use an image or a video file.")
        stream = container.streams.video[0]
        if stream.codec_context is None:  # a format FFmpeg recognises without a decoder here (SVG)
            raise InputError(unreadable.format(f" (no decoder for {stream.codec.name if stream.codec else 'it'})"))
        height, width = stream.codec_context.height, stream.codec_context.width
        if height * width == 0:  # FFmpeg probes many non-video files as a dimensionless "video"
            raise InputError(unreadable.format(""))
        check_frame_size(height, width, f"video {path.name}")
        stream.thread_type = "AUTO"
        expected = stream.frames if max_frames is None else min(stream.frames, max_frames)
        frames = np.empty((expected, height, width, 3), dtype=np.uint8)
        extra = []  # frames beyond the container's count, which is only an estimate for some formats
        count = 0
        try:
            for frame in container.decode(stream):
                if max_frames is not None and count >= max_frames:
                    break
                image = frame.to_ndarray(format="rgb24")
                if image.shape != (height, width, 3):
                    raise InputError(f"video {path.name} changes frame size mid-stream ({width}x{height} to "
                                     f"{image.shape[1]}x{image.shape[0]}). Re-encode it at one size.")
                if count < expected:
                    frames[count] = image
                else:
                    extra.append(image)
                count += 1
        except av.error.FFmpegError as exc:
            raise InputError(f"video {path.name} is damaged: decoding failed after {count} frame(s) ({exc}). "
                             f"Re-encode it (e.g. H.264 MP4).") from exc
    if count == 0:
        raise InputError(f"video {path.name} contains no decodable frames. Re-encode it (e.g. H.264 MP4).")
    return np.concatenate([frames, np.stack(extra)]) if extra else frames[:count]


def read_animation(path: Path | str, max_frames: Optional[int] = None) -> np.ndarray:
    """Decode an animated image's frames with Pillow to ``(N, H, W, 3)`` uint8 RGB."""
    from PIL import Image, ImageSequence

    path = Path(path)
    frames = []
    try:
        with _opened(Image, path) as img:
            check_frame_size(img.height, img.width, f"animation {path.name}")
            for frame in ImageSequence.Iterator(img):
                if max_frames is not None and len(frames) >= max_frames:
                    break
                frames.append(np.asarray(frame.convert("RGB")))
    except InputError:
        raise
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"animation {path.name} could not be decoded after {len(frames)} frame(s) ({exc}). "
                         "Convert it to an MP4 video.") from exc
    return np.stack(frames)


def load_source(path: Path | str, max_frames: Optional[int] = None) -> tuple[np.ndarray, bool]:
    """Read an image or a video file: ``(frames (N, H, W, C), is_image)``.

    Still images (anything Pillow identifies that has a single frame) take the image path;
    everything else, including animated GIF/WebP, is decoded as a video. A video of a single
    frame counts as a still, as one IMAGE frame does in ComfyUI: the portrait is animated.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise InputError(f"source file {path} does not exist. Check the path.")
    try:
        with _opened(Image, path) as img:
            pillow_frames, kind = getattr(img, "n_frames", 1), img.format
    except (UnidentifiedImageError, OSError):
        pillow_frames, kind = 0, None  # not an image Pillow knows
    if kind == "TIFF" and pillow_frames > 1:
        # Pages, not a timed animation; FFmpeg would read the first one and say nothing.
        raise InputError(f"image {path.name} is a TIFF of {pillow_frames} pages; Ditto animates one portrait. "
                         "Save the page to use as its own image (PNG or JPEG) and try again.")
    if pillow_frames == 1:
        return read_image(path), True
    try:
        frames = read_video(path, max_frames)
    except InputError:
        if not pillow_frames:
            raise
        frames = read_animation(path, max_frames)  # an animation FFmpeg cannot decode here (animated WebP)
    return frames, len(frames) == 1
