"""Register an avatar: source frames -> :class:`SourceInfo` (crops, features, motion, eyes).

Per frame, on the host: detect the face (first frame only), 106 landmarks, a first crop for
the 203-point model, 203 landmarks; video frames instead track from the previous frame's 203
landmarks. Then, batched on the device: the 512 face crop of every frame, its 256 network
input, the appearance and motion extractors, and MediaPipe's 478 landmarks for the eyes. A
video's motion is finally smoothed over time. With a cache, a repeat call only hashes the
frames and loads the stored tensors.
"""
from __future__ import annotations

import logging
import warnings
from typing import Optional, Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InputError
from ..models.keypoints import MotionInfo
from ..progress import ProgressCallback, report
from .cache import AvatarCache, cache_key, source_from_tensors, source_to_tensors
from .crop import crop_transform, letterbox_transform, network_input, warp_frames
from .eye_info import NUM_MESH_POINTS, default_eye_measurements, eye_measurements
from .face_detector import Faces
from .image_io import ArrayLike, check_frame_size, fit_size, resize_frames, to_rgb_uint8
from .options import RegistrationOptions
from .source_info import SourceInfo

log = logging.getLogger(__name__)

CROP_SIZE = 512
MIN_FACE_SIZE = 128
"""Faces smaller than this (pixels, detection box) are upscaled so much that renders turn soft."""
FEATURE_ELEMENTS = 32 * 16 * 64 * 64
"""Elements of one frame's appearance features (the extractor's (32, 16, 64, 64) volume): 8 MiB in fp32."""
FEATURE_MEMORY_SHARE = 0.5
"""Share of the device's free memory a source's appearance features may take; the rest is left
for warp+decode, put-back and encoding."""
CUT_FACE_FRACTION = 0.05
"""A face with more than this share of its landmarks outside the frame counts as cut by the border."""
_MOTION_OUTPUTS = ("pitch", "yaw", "roll", "t", "exp", "scale", "kp")  # the motion extractor's output order


class Extractors(Protocol):
    """Anything holding the two source networks, e.g. :class:`~ditto_core.models.ditto_models.DittoModels`."""

    appearance_extractor: nn.Module
    motion_extractor: nn.Module


def register_avatar(
    frames_rgb: ArrayLike,
    models: Extractors,
    aux,
    options: Optional[RegistrationOptions] = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    cache: Optional[AvatarCache] = None,
    progress: Optional[ProgressCallback] = None,
    is_image: Optional[bool] = None,
    model_identity: Optional[str] = None,
    name: str = "source image",
    batch_size: int = 8,
) -> SourceInfo:
    """Register ``frames_rgb`` (one portrait or the frames of a video) as a SourceInfo on ``device``.

    Args:
        frames_rgb: ``(N, H, W, C)``, ``(H, W, C)`` or ``(H, W)`` pixels, tensor or array; any
            format :func:`~ditto_core.registration.image_io.to_rgb_uint8` accepts.
        models: holds ``appearance_extractor`` and ``motion_extractor``, already on ``device``
            in ``dtype``.
        aux: holds ``face_detector``, ``landmark106``, ``landmark203`` (needed when
            ``options.detect_face``) and ``landmark478`` (optional: without it, or where it
            finds no face, eye measurements take neutral defaults and a warning is issued).
        options: crop, smoothing, size and face-selection options.
        device, dtype: where the result lives; ``f_s`` has ``dtype``, everything else float32
            (``frames`` uint8). Default device: CUDA when available.
        cache: avatar cache; a hit skips every model.
        progress: ``callback(done, total)``; raising from it cancels (nothing is cached then).
        is_image: still portrait (True) or video (False); default: ``N == 1``.
        model_identity: fingerprint of the extractor files for the cache key; default
            ``models.identity`` (combined with ``aux.identity``).
        name: how error messages refer to the source.
        batch_size: frames per extractor batch.

    Raises:
        InputError: unusable pixels or options, no face, ``face_index`` out of range.
    """
    options = (options or RegistrationOptions()).validate()
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    rgb = to_rgb_uint8(frames_rgb, name)
    count, height, width = rgb.shape[:3]
    check_frame_size(height, width, name)
    is_image = count == 1 if is_image is None else bool(is_image)
    check_feature_memory(count, dtype, device, name)

    key = None
    if cache is not None:
        identity = model_identity if model_identity is not None else getattr(models, "identity", "")
        settings = {**options.fingerprint(), "dtype": str(dtype), "is_image": is_image}
        key = cache_key(rgb.cpu().numpy(), settings, f"{identity}|{getattr(aux, 'identity', '')}")
    frames = resize_frames(rgb.to(device), *fit_size(height, width, options.max_size))
    if cache is not None:
        hit = _from_cache(cache, key, frames, is_image, device)
        if hit is not None:
            return hit

    steps = count * (2 if options.detect_face else 1)
    with torch.no_grad():
        m_o2c = _crop_transforms(frames, aux, options, name, progress, steps)
        m_c2o = torch.linalg.inv(torch.from_numpy(m_o2c)).to(device=device, dtype=torch.float32)
        f_s, motion, eye_open, eye_ball = _extract(
            frames, m_c2o, models, getattr(aux, "landmark478", None), dtype, batch_size, progress, steps
        )
    sc = motion.kp[:1].clone()  # taken before smoothing, as Ditto's registrar does
    if not is_image:
        motion = smooth_motion(motion, options.smo_k_s)
    source = SourceInfo(frames=frames, M_c2o=m_c2o, f_s=f_s, motion=motion, eye_open=eye_open,
                        eye_ball=eye_ball, is_image=is_image, cache_key=key, sc=sc)
    if cache is not None:
        try:
            cache.store(key, source_to_tensors(source), {"is_image": is_image, "num_frames": count})
        except OSError as exc:  # the result is fine; only the speed-up is lost
            warnings.warn(f"Could not write the avatar cache in {cache.root} ({exc}); continuing without it.",
                          RuntimeWarning, stacklevel=2)
    return source


def available_memory(device: torch.device) -> Optional[int]:
    """Bytes still allocatable on ``device`` (free VRAM plus what PyTorch's allocator holds
    unused, or the host's ``MemAvailable``); None where the platform does not say."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as meminfo:
                for line in meminfo:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
    return None


def check_feature_memory(count: int, dtype: torch.dtype, device: torch.device, name: str) -> None:
    """Refuse a source whose per-frame appearance features cannot fit, before any work is done.

    Every frame of a video source keeps its own 8 MiB (fp32) feature volume for the whole
    render, so a long clip would otherwise fail minutes later with an out-of-memory error.
    """
    free = available_memory(device)
    per_frame = FEATURE_ELEMENTS * dtype.itemsize
    budget = FEATURE_MEMORY_SHARE * free if free is not None else None
    if budget is None or count * per_frame <= budget:
        return
    fits = int(budget // per_frame)
    raise InputError(
        f"{name} has {count} frames, whose appearance features need {count * per_frame / 2**30:.1f} GiB: more than "
        f"the {budget / 2**30:.1f} GiB registration may use on {device} (half of the {free / 2**30:.1f} GiB free). "
        f"Trim the video to at most {fits} frames ({fits / 25:.1f} s at 25 fps), or load the models in fp16 on a "
        f"GPU, which halves the need."
    )


def _from_cache(cache: AvatarCache, key: str, frames: Tensor, is_image: bool, device: torch.device):
    loaded = cache.load(key, device)
    if loaded is None:
        return None
    tensors, _ = loaded
    try:
        source = source_from_tensors(tensors, frames, is_image, key)
        per_frame = (source.M_c2o, source.f_s, source.eye_open, source.eye_ball, *source.motion.as_dict().values())
        if any(t.shape[0] != len(frames) for t in per_frame):
            raise ValueError("frame count differs")
        if tuple(source.source_kp.shape) != (1, 63):
            raise ValueError(f"sc has shape {tuple(source.source_kp.shape)}")
    except (KeyError, TypeError, ValueError) as exc:
        warnings.warn(f"Avatar cache entry {key} in {cache.root} is incomplete ({exc}); recomputing it.",
                      RuntimeWarning, stacklevel=3)
        return None
    return source


def _crop_transforms(
    frames: Tensor, aux, options: RegistrationOptions, name: str, progress: Optional[ProgressCallback], steps: int
) -> np.ndarray:
    """(N, 3, 3) float64 frame -> 512 crop maps, from landmarks (or the whole frame)."""
    count, height, width = frames.shape[:3]
    if not options.detect_face:
        if max(height, width) < MIN_FACE_SIZE:
            _warn_small_face(name, max(height, width))
        return np.broadcast_to(letterbox_transform(height, width, CROP_SIZE), (count, 3, 3)).copy()
    host = frames.cpu().numpy()  # the landmark models run on host arrays through onnxruntime
    landmarks = np.empty((count, 203, 2))
    guide = None
    for i, frame in enumerate(host):  # sequential by nature: each frame starts from the last one's landmarks
        if guide is None:
            guide = aux.landmark106(frame, select_face(aux.face_detector(frame), options.face_index, name))
        guide = landmarks[i] = aux.landmark203(frame, guide)
        report(progress, i + 1, steps)
    _warn_if_cut(landmarks, height, width, name)
    return crop_transform(landmarks, CROP_SIZE, options.crop_scale, options.crop_vx_ratio, options.crop_vy_ratio,
                          options.crop_flag_do_rot)


def select_face(faces: Faces, face_index: Optional[int], name: str) -> np.ndarray:
    """The (4,) box to register: the largest face, or face ``face_index`` counted left to right."""
    if len(faces) == 0:
        raise InputError(
            f"No face was found in {name}. Use a photo with one frontal, unoccluded, well-lit face at least "
            f"{MIN_FACE_SIZE} px across, or a larger image; if the image already is a tight face crop, "
            f"turn face detection off (detect_face=False)."
        )
    if face_index is None:
        areas = (faces.boxes[:, 2] - faces.boxes[:, 0]) * (faces.boxes[:, 3] - faces.boxes[:, 1])
        index = int(np.argmax(areas))
    else:
        left_to_right = np.argsort(faces.boxes[:, 0] + faces.boxes[:, 2], kind="stable")
        if face_index >= len(faces):
            raise InputError(
                f"face_index {face_index} is out of range: {len(faces)} face(s) were found in {name}, numbered "
                f"0 to {len(faces) - 1} from left to right. Pick one of those, or leave face_index empty for "
                f"the largest face."
            )
        index = int(left_to_right[face_index])
    if faces.sizes[index] < MIN_FACE_SIZE:
        _warn_small_face(name, float(faces.sizes[index]))
    return faces.boxes[index]


def _warn_small_face(name: str, size: float) -> None:
    warnings.warn(
        f"The face in {name} is only {size:.0f} px across (below {MIN_FACE_SIZE} px): it will be upscaled "
        f"and the video will look soft. Use a larger or closer portrait for sharp results.",
        UserWarning,
        stacklevel=4,
    )


def _warn_if_cut(landmarks: np.ndarray, height: int, width: int, name: str) -> None:
    """Warn when a face reaches past the frame: the crop samples black there, a part of the
    face the networks then have to render from nothing."""
    outside = ((landmarks < 0) | (landmarks > (width - 1, height - 1))).any(-1).mean(-1)  # (N,) share per frame
    worst = float(outside.max())
    if worst > CUT_FACE_FRACTION:
        warnings.warn(
            f"The face in {name} is cut by the image border ({worst:.0%} of its landmarks lie outside the picture): "
            f"the missing part is filled with black, so expect artefacts along that edge. Use a picture that shows "
            f"the whole head with some margin.",
            UserWarning,
            stacklevel=4,
        )


def _extract(
    frames: Tensor,
    m_c2o: Tensor,
    models: Extractors,
    landmarker,
    dtype: torch.dtype,
    batch_size: int,
    progress: Optional[ProgressCallback],
    steps: int,
) -> tuple[Tensor, MotionInfo, Tensor, Tensor]:
    """Crops -> (f_s, motion, eye_open, eye_ball) for all frames, ``batch_size`` at a time."""
    count = len(frames)
    features: Optional[Tensor] = None
    motions, meshes = [], []
    for start in range(0, count, batch_size):
        crops = warp_frames(frames[start:start + batch_size], m_c2o[start:start + batch_size], CROP_SIZE)
        image = network_input(crops, dtype)
        batch = models.appearance_extractor(image)
        if features is None:  # filled in place: concatenating batches would briefly hold the volumes twice
            features = batch.new_empty((count, *batch.shape[1:]))
        features[start:start + len(image)] = batch
        outputs = models.motion_extractor(image)
        motions.append(MotionInfo(**{k: v.reshape(len(image), -1).float() for k, v in zip(_MOTION_OUTPUTS, outputs)}))
        if landmarker is not None:
            meshes.extend(landmarker(crop) for crop in crops.cpu().numpy())
        report(progress, steps - count + min(start + batch_size, count), steps)
    eye_open, eye_ball = _eye_measurements(meshes, count, frames.device)
    return features, MotionInfo.cat(motions), eye_open, eye_ball


def _eye_measurements(
    meshes: Sequence[Optional[np.ndarray]], count: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Eye measurements from per-frame 478-point meshes; neutral defaults where a mesh is missing."""
    eye_open, eye_ball = default_eye_measurements(count, device)
    found = [i for i, mesh in enumerate(meshes) if mesh is not None]
    if found:
        points = torch.from_numpy(np.stack([meshes[i] for i in found])).to(device)
        eye_open[found], eye_ball[found] = eye_measurements(points.reshape(-1, NUM_MESH_POINTS, 3))
    if not meshes:
        # The no-detector mode runs without face models by design (random weights, ready crops):
        # a note, not a warning about a file the mode does not need.
        log.info("No face_landmarker.task loaded: eye measurements use neutral defaults, so eye openness and "
                 "gaze do not follow the source (put the file in aux_models/ for them to).")
    elif len(found) < count:
        warnings.warn(
            f"Eye measurements use neutral defaults (MediaPipe found no face in {count - len(found)} of {count} "
            f"crop(s)); eye openness and gaze will not follow the source. Use a clearer frontal portrait.",
            UserWarning,
            stacklevel=4,
        )
    return eye_open, eye_ball


def smooth_motion(motion: MotionInfo, kernel: int) -> MotionInfo:
    """Centred moving average over frames of every motion quantity (angle logits included).

    The window holds ``kernel // 2`` frames on each side, truncated at the ends and averaged
    over what remains, as Ditto's mean filter does for video sources.
    """
    half = kernel // 2
    if len(motion) < 2 or half == 0:
        return motion

    def mean_filter(x: Tensor) -> Tensor:  # (N, C)
        pooled = F.avg_pool1d(x.T[None], 2 * half + 1, stride=1, padding=half, count_include_pad=False)
        return pooled[0].T.contiguous()

    return motion.map(mean_filter)
