"""HuBERT speech features at 25 fps, computed the way Ditto's offline pipeline computes them.

The network is Ditto's streaming HuBERT-large export, ``hubert_streaming_fix_kv.onnx``: one
float32 input ``(1, samples)`` of raw 16 kHz speech (no normalisation), one output of 1024-wide
rows at 50 Hz, ``(rows, 1024)`` (the export drops the batch axis, so windows cannot be
batched: one window per call). :mod:`.chunking` documents how a clip is cut into windows and
how each window's rows become video frames.

On a CUDA device the session runs on onnxruntime's CUDA execution provider with I/O binding:
windows are read straight from the torch tensor and rows written into a torch buffer, on a
stream of our own that is ordered with the caller's, so no sample or row crosses to the host
(onnxruntime may still wait on that stream inside each ``run`` call: its API offers no way
around it). Without that provider (the plain ``onnxruntime`` wheel) it runs on the CPU and the
features are moved to the requested device once at the end.

The PyTorch backend instead reads the graph's weights into our own :class:`~ditto_core.models.
hubert.Hubert` (:mod:`ditto_core.models.hubert_onnx_weights`, no onnxruntime involved) and
encodes all windows of a clip in batched forwards of at most ``max_batch_windows`` windows, so
memory stays bounded however long the clip. ``backend="auto"`` picks it whenever the file maps
onto the module -- on the CPU too, where the batched module measured faster than onnxruntime
for HuBERT-large (docs/HUBERT.md has the numbers) -- and onnxruntime otherwise (logged once per
file at INFO level: the result is the same, only slower; the smoke mode's stand-in model is
not a HuBERT and takes that path on purpose).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..cuda_streams import owned_stream
from ..errors import CheckpointError, InputError, MissingModelError
from ..model_files import HF_AUX_FOLDER, HF_REPO, HUBERT_ONNX_NAME, aux_dirs, find_hubert
from ..progress import ProgressCallback, report
from .audio_features import SAMPLE_RATE, AudioFeatures
from .chunking import HUBERT_ROWS_PER_FRAME, StreamingWindow, num_video_frames
from .validation import require_finite, require_float_waveform, warn_on_level

logger = logging.getLogger(__name__)

HUBERT_DIM = 1024
# One window's worth of valid frames (5 x 40 ms). The reference would animate even 1 sample,
# but a clip this short is nearly always a bad trim or the wrong input, and padding it
# ourselves would silently change the video's length: we refuse it and say how to pad.
MIN_DURATION_S = 0.2
_DOWNLOAD_HINT = (
    f"download {HF_AUX_FOLDER}/{HUBERT_ONNX_NAME} from https://huggingface.co/{HF_REPO} into "
    f"models/ditto/aux_models/ (or run `python -m ditto_core download`)"
)

Runner = Callable[[Tensor], Tensor]
"""Runs HuBERT on windows ``(n, samples)`` float32 and returns their rows ``(n, rows, 1024)``."""

BACKENDS = ("auto", "torch", "onnxruntime")
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Measured (docs/HUBERT.md): batched windows in PyTorch beat onnxruntime's one window per call
# on the CPU for full-width HuBERTs (onnxruntime wins only for toy sizes).
AUTO_BACKEND_ON_CPU = "torch"
# fp16 features are within 2e-3 rel-L2 of fp32 ones (docs/HUBERT.md; bf16: 1.5e-2), the error
# the half-precision render networks already make; layer norms and softmax run in fp32.
DEFAULT_CUDA_PRECISION = "fp16"
# Windows per batched forward: bounds activation memory whatever the clip length (HuBERT-large
# peaks at the first conv layer, roughly 8 MB a window in fp16, twice that in fp32).
DEFAULT_MAX_BATCH_WINDOWS = {"cuda": 128, "cpu": 16}
_FALLBACK_ANNOUNCED: set[str] = set()  # files whose onnxruntime fallback was logged already


class _CpuRunner:
    """onnxruntime on the CPU: windows in and rows out as zero-copy numpy views."""

    def __init__(self, session) -> None:
        self._session = session
        self._input = session.get_inputs()[0].name
        self._output = session.get_outputs()[0].name

    def __call__(self, window: Tensor) -> Tensor:
        (rows,) = self._session.run([self._output], {self._input: window.numpy()})
        return _with_batch_axis(torch.from_numpy(rows))


class _CudaRunner:
    """onnxruntime's CUDA provider bound to torch memory: samples and rows never visit the host.

    The rows come back in one buffer that the next call overwrites; read them before that.
    """

    def __init__(self, session, device: torch.device) -> None:
        import onnxruntime as ort

        self._session = session
        self._input = session.get_inputs()[0].name
        self._output = session.get_outputs()[0].name
        self._device = device
        self._binding = session.io_binding()
        self._rows: Optional[Tensor] = None
        self._run_options = ort.RunOptions()
        # The session computes on our torch stream; the stream orders it, a blocking sync at
        # the end of every run would only stall the host.
        self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")

    def _bind(self, name: str, tensor: Tensor, output: bool) -> None:
        bind = self._binding.bind_output if output else self._binding.bind_input
        bind(name, "cuda", self._device.index, np.float32, tuple(tensor.shape), tensor.data_ptr())

    def __call__(self, window: Tensor) -> Tensor:
        self._bind(self._input, window, output=False)
        if self._rows is None:
            # The output shape is only known once the graph has run: let onnxruntime allocate
            # it this once, then keep a torch buffer of that shape bound for every later call.
            self._binding.bind_output(self._output, "cuda", self._device.index)
            self._session.run_with_iobinding(self._binding, self._run_options)
            shape = self._binding.get_outputs()[0].shape()
            self._rows = torch.empty(shape, dtype=torch.float32, device=self._device)
            self._bind(self._output, self._rows, output=True)
        self._session.run_with_iobinding(self._binding, self._run_options)
        return _with_batch_axis(self._rows)


def _with_batch_axis(rows: Tensor) -> Tensor:
    """The official export drops the batch axis: ``(rows, 1024)`` -> ``(1, rows, 1024)``."""
    return rows if rows.dim() == 3 else rows.unsqueeze(0)


class _TorchRunner:
    """Our :class:`~ditto_core.models.hubert.Hubert` on a batch of windows; rows in float32.

    In fp32 the products run without TF32 (cuDNN would otherwise use it for the convolutions
    by default), so the rows match onnxruntime's fp32 ones; the process-wide flags are put back.
    In fp16 a batch whose rows overflow (a weight set whose activations exceed fp16's range)
    switches the module to fp32 for good, with a warning, and is computed again.
    """

    def __init__(self, model) -> None:
        self.model = model

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @torch.inference_mode()
    def __call__(self, windows: Tensor) -> Tensor:
        rows = self.unchecked(windows)
        if self.dtype == torch.float16 and not bool(torch.isfinite(rows).all()):
            self.overflowed()
            return self._fp32(windows)
        return rows

    def unchecked(self, windows: Tensor) -> Tensor:
        """The rows without the fp16 overflow check (a CUDA graph records this; its caller checks)."""
        return self._fp32(windows) if self.dtype == torch.float32 else self.model(windows).float()

    def overflowed(self) -> None:
        """fp16 rows were not finite: compute in fp32 from now on."""
        logger.warning("HuBERT overflowed in fp16 on this speech; it runs in fp32 from now on "
                       "(precision='fp32' avoids the retry).")
        self.model.float()

    def _fp32(self, windows: Tensor) -> Tensor:
        matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            return self.model(windows)
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, conv


def _open_session(path: Path, stream: Optional[torch.cuda.Stream]):
    import onnxruntime as ort

    if stream is None:
        providers: list = ["CPUExecutionProvider"]
    else:
        cuda_options = {"device_id": stream.device.index, "user_compute_stream": str(stream.cuda_stream)}
        providers = [("CUDAExecutionProvider", cuda_options), "CPUExecutionProvider"]
    try:
        return ort.InferenceSession(str(path), providers=providers)
    except Exception as err:  # onnxruntime raises its own untyped pybind errors
        raise CheckpointError(
            f"cannot load HuBERT model {str(path)!r} ({err}); the file is damaged or not an ONNX "
            f"model. Re-download it: {_DOWNLOAD_HINT}."
        ) from err


def _check_signature(session, path: Path, window: StreamingWindow) -> None:
    """Refuse graphs that are not Ditto's streaming HuBERT before any audio reaches them."""
    inputs, outputs = session.get_inputs(), session.get_outputs()
    wrong = None
    if len(inputs) != 1 or inputs[0].type != "tensor(float)" or len(inputs[0].shape) != 2:
        wrong = "one float input of shape (1, samples)"
    # An output whose rank the graph does not declare (shape []) is checked when it runs.
    elif not outputs or outputs[0].type != "tensor(float)" or len(outputs[0].shape) not in (0, 2, 3):
        wrong = "a float output of shape (rows, 1024)"
    elif isinstance(inputs[0].shape[1], int) and inputs[0].shape[1] != window.num_samples:
        wrong = f"windows of {window.num_samples} samples, not {inputs[0].shape[1]}"
    if wrong:
        raise CheckpointError(
            f"{str(path)!r} is not Ditto's streaming HuBERT: it should take {wrong}. "
            f"Use the official model: {_DOWNLOAD_HINT}."
        )


class HubertFeatureExtractor:
    """Speech -> :class:`AudioFeatures`, reproducing Ditto's offline ``wav2feat`` for HuBERT.

    Args:
        model_path: ``hubert_streaming_fix_kv.onnx``.
        device: where features are returned and HuBERT runs (onnxruntime runs on the GPU only
            with its CUDA provider, ``onnxruntime-gpu``; else on the CPU).
        window: streaming window layout; the default is the one the LMDM was trained with.
        backend: ``"torch"`` (our module, weights read from the file), ``"onnxruntime"``, or
            ``"auto"``: PyTorch when the file maps onto the module, onnxruntime otherwise.
        precision: the PyTorch backend's dtype, ``"fp32"``, ``"fp16"`` or ``"bf16"``; None:
            fp16 on CUDA, fp32 on the CPU. onnxruntime always computes in fp32.
        max_batch_windows: windows per batched forward of the PyTorch backend (memory bound);
            None: 128 on CUDA, 16 on the CPU.

    Attributes:
        backend: ``"torch"`` or ``"onnxruntime"``, what ``"auto"`` resolved to.
        execution_provider: onnxruntime's provider, or ``"torch-cuda"`` / ``"torch-cpu"``.
    """

    def __init__(
        self,
        model_path: Union[str, os.PathLike],
        device: Union[str, torch.device] = "cpu",
        window: StreamingWindow = StreamingWindow(),
        backend: str = "auto",
        precision: Optional[str] = None,
        max_batch_windows: Optional[int] = None,
    ) -> None:
        path = Path(model_path)
        if backend not in BACKENDS:
            raise InputError(f"HuBERT backend {backend!r} is unknown; choose one of {', '.join(BACKENDS)}.")
        if precision is not None and precision not in PRECISIONS:
            raise InputError(f"HuBERT precision {precision!r} is unknown; choose one of {', '.join(PRECISIONS)}.")
        if precision not in (None, "fp32") and backend == "onnxruntime":
            raise InputError(f"HuBERT precision {precision!r} needs backend 'torch' (onnxruntime computes in fp32).")
        if max_batch_windows is not None and max_batch_windows < 1:
            raise InputError(f"max_batch_windows must be at least 1, got {max_batch_windows}.")
        if not path.is_file():
            raise MissingModelError(f"HuBERT model not found at {str(path)!r}; {_DOWNLOAD_HINT}.")
        self.device = torch.device(device)
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise InputError(f"device {device!r} was asked for, but PyTorch sees no CUDA GPU; use 'cpu'.")
            index = torch.cuda.current_device() if self.device.index is None else self.device.index
            self.device = torch.device("cuda", index)
        self.window = window
        self.model_path = path  # a second extractor (another thread's) opens its own session from it
        self.max_batch_windows = 1
        if backend == "auto":
            backend = "torch" if self.device.type == "cuda" else AUTO_BACKEND_ON_CPU
            explicit = False
        else:
            explicit = True
        if backend == "torch":
            try:
                self._init_torch(path, precision, max_batch_windows)
                return
            except CheckpointError as err:
                if explicit:
                    raise
                if str(path.resolve()) not in _FALLBACK_ANNOUNCED:
                    _FALLBACK_ANNOUNCED.add(str(path.resolve()))
                    logger.info("HuBERT runs on onnxruntime: %s", err)
        self._init_onnxruntime(path)

    def _init_torch(self, path: Path, precision: Optional[str], max_batch_windows: Optional[int]) -> None:
        from ..models.hubert_weight_cache import load_cached_hubert

        precision = precision or (DEFAULT_CUDA_PRECISION if self.device.type == "cuda" else "fp32")
        # The cache entry serves later processes: this one renders while it is written.
        model = load_cached_hubert(path, self.device, PRECISIONS[precision], write_in_background=True)
        if model.config.hidden_size != HUBERT_DIM:
            raise CheckpointError(f"{str(path)!r} is a HuBERT {model.config.hidden_size} wide; Ditto's is "
                                  f"{HUBERT_DIM} wide. {_DOWNLOAD_HINT}.")
        self.backend = "torch"
        self.execution_provider = f"torch-{self.device.type}"
        self.max_batch_windows = max_batch_windows or DEFAULT_MAX_BATCH_WINDOWS[self.device.type]
        self._stream, self._compute_device = None, self.device
        self._runner: Runner = _TorchRunner(model)

    def _init_onnxruntime(self, path: Path) -> None:
        import onnxruntime as ort

        self.backend = "onnxruntime"
        wants_cuda = self.device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers()
        stream = owned_stream(self, self.device) if wants_cuda else None
        session = _open_session(path, stream)
        _check_signature(session, path, self.window)
        self.execution_provider: str = session.get_providers()[0]
        if self.execution_provider == "CUDAExecutionProvider":
            self._stream, self._compute_device = stream, self.device
            self._runner = _CudaRunner(session, self.device)
        else:
            if self.device.type == "cuda":
                logger.warning(
                    "onnxruntime has no working CUDA provider here, so HuBERT runs on the CPU "
                    "(slower, same result). Install onnxruntime-gpu to run it on the GPU."
                )
            self._stream, self._compute_device = None, torch.device("cpu")
            self._runner = _CpuRunner(session)

    @property
    def model(self):
        """The PyTorch module of the torch backend (None on onnxruntime)."""
        return getattr(self._runner, "model", None)

    @property
    def precision(self) -> str:
        """The dtype HuBERT computes in: the torch module's, ``"fp32"`` on onnxruntime."""
        if self.model is None:
            return "fp32"
        return next(name for name, dtype in PRECISIONS.items() if dtype == self._runner.dtype)

    @classmethod
    def from_model_dir(
        cls, model_dir: Union[str, os.PathLike], device: Union[str, torch.device] = "cpu"
    ) -> "HubertFeatureExtractor":
        """Find the model in ``<model_dir>`` or its aux folders (:func:`~ditto_core.model_files.aux_dirs`)."""
        path = find_hubert(model_dir)
        if path is not None:
            return cls(path, device)
        looked = ", ".join(repr(str(folder / HUBERT_ONNX_NAME)) for folder in aux_dirs(model_dir))
        raise MissingModelError(f"{HUBERT_ONNX_NAME} not found (looked at {looked}); {_DOWNLOAD_HINT}.")

    def __call__(
        self,
        audio_16k: Tensor,
        sample_rate: int = SAMPLE_RATE,
        progress: Optional[ProgressCallback] = None,
    ) -> AudioFeatures:
        """Encode mono 16 kHz speech.

        Args:
            audio_16k: float ``(samples,)`` in [-1, 1], at least 0.2 s, any device
                (:func:`~ditto_core.audio.to_mono_16k` makes one from any waveform).
            sample_rate: the rate of ``audio_16k``; anything but 16000 is refused.
            progress: called ``(windows_done, windows_total)`` after each window
                (onnxruntime) or batch of windows (PyTorch); may raise to cancel.

        Returns:
            :class:`AudioFeatures` whose ``features`` are float32 ``(num_frames, 1024)`` on
            ``self.device``, ``num_frames = ceil(samples / 16000 * 25)``.
        """
        self._check_speech(audio_16k, sample_rate)
        audio = audio_16k.detach().to(self._compute_device, torch.float32)
        if self._stream is None:
            features = self._encode(audio, progress)
        else:
            caller = torch.cuda.current_stream(self.device)
            self._stream.wait_stream(caller)
            audio.record_stream(self._stream)
            with torch.cuda.stream(self._stream):
                features = self._encode(audio, progress)
            caller.wait_stream(self._stream)
            features.record_stream(caller)
        return AudioFeatures(features=features.to(self.device), duration_s=audio.shape[0] / SAMPLE_RATE)

    def _check_speech(self, audio: Tensor, sample_rate: int) -> None:
        name = "speech for HuBERT"
        require_float_waveform(audio, name)
        if sample_rate != SAMPLE_RATE:
            raise InputError(f"{name}: sampled at {sample_rate} Hz; resample to 16 kHz first (to_mono_16k).")
        if audio.dim() != 1:
            raise InputError(
                f"{name}: expected mono samples of shape (samples,), got {tuple(audio.shape)}; "
                "mix it down with to_mono_16k first."
            )
        duration = audio.shape[0] / SAMPLE_RATE
        if duration < MIN_DURATION_S:
            raise InputError(
                f"{name}: the audio lasts {duration:.3f} s, too short to animate (at least "
                f"{MIN_DURATION_S} s is needed). Pad it with silence if a clip this short is intended."
            )
        require_finite(audio, name, SAMPLE_RATE)
        warn_on_level(audio, name)

    def encode_window(self, samples: Tensor) -> Tensor:
        """Features of one streaming window, the unit of Ditto's online ``run_chunk``.

        Args:
            samples: float ``(window.num_samples,)`` 16 kHz speech (6480 samples: past, valid
                and future context), any device; checked for shape only (the caller streams).

        Returns:
            ``(window.valid, 1024)`` float32 on ``self.device``: the valid frames' features.
        """
        if samples.shape != (self.window.num_samples,):
            raise InputError(
                f"a streaming HuBERT window has {self.window.num_samples} samples, got shape "
                f"{tuple(samples.shape)}"
            )
        return self.encode_windows(samples.view(1, -1))[0]

    @torch.no_grad()
    def encode_windows(self, windows: Tensor) -> Tensor:
        """Features of several streaming windows (of one stream or of many), batched.

        Args:
            windows: float ``(n, window.num_samples)``, any device.

        Returns:
            ``(n, window.valid, 1024)`` float32 on ``self.device``; row ``i`` is
            :meth:`encode_window` of ``windows[i]`` (each window's features depend on it alone).
        """
        if windows.dim() != 2 or windows.shape[1] != self.window.num_samples:
            raise InputError(
                f"streaming HuBERT windows have shape (n, {self.window.num_samples}), got {tuple(windows.shape)}"
            )
        audio = windows.detach().to(self._compute_device, torch.float32)
        valid, n = self.window.valid, windows.shape[0]
        if self._stream is None:
            return self._batched_features(audio).view(n, valid, HUBERT_DIM).to(self.device)
        caller = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(caller)
        audio.record_stream(self._stream)
        with torch.cuda.stream(self._stream):
            # A new tensor: the runner's row buffer is overwritten by the next window.
            features = self._batched_features(audio)
        caller.wait_stream(self._stream)
        features.record_stream(caller)
        return features.view(n, valid, HUBERT_DIM)

    def _batched_features(self, windows: Tensor) -> Tensor:
        """``(n, num_samples)`` -> ``(n * valid, 1024)`` in forwards of at most ``max_batch_windows``."""
        step, valid = self.max_batch_windows, self.window.valid
        features = torch.empty(windows.shape[0] * valid, HUBERT_DIM, device=windows.device)
        for first in range(0, windows.shape[0], step):
            self._valid_features(windows[first : first + step], out=features[first * valid : (first + step) * valid])
        return features

    def _valid_features(self, windows: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """``(n, num_samples)`` on the compute device -> ``(n * valid, 1024)``."""
        return self.features_of_rows(self._runner(windows), windows.shape[0], out=out)

    def unchecked_features(self, windows: Tensor) -> Tensor:
        """:meth:`encode_windows` of ``(n, num_samples)`` windows on the PyTorch backend's device,
        as ``(n * valid, 1024)``, without the fp16 overflow check (a CUDA graph records this and
        checks the result itself: :meth:`overflowed` is its answer to rows that are not finite)."""
        return self.features_of_rows(self._runner.unchecked(windows), windows.shape[0])

    def overflowed(self) -> None:
        """fp16 rows were not finite: the PyTorch backend computes in fp32 from now on."""
        self._runner.overflowed()

    def features_of_rows(self, rows: Tensor, n: int, out: Optional[Tensor] = None) -> Tensor:
        """HuBERT's output for ``n`` windows, ``(n, rows, 1024)`` -> the valid frames' features
        ``(n * valid, 1024)``: row pairs averaged (50 -> 25 Hz). Refuses rows that are not Ditto's model's."""
        needed = HUBERT_ROWS_PER_FRAME * (self.window.valid + self.window.future)
        batch_ok = rows.dim() == 3 and rows.shape[0] == n
        if not batch_ok or rows.shape[2] != HUBERT_DIM or rows.shape[1] < needed:
            shape = tuple(rows.shape[1:]) if rows.dim() == 3 else tuple(rows.shape)
            raise CheckpointError(
                f"the HuBERT model returned rows of shape {shape} for a window of "
                f"{self.window.num_samples} samples; Ditto's model gives (20, {HUBERT_DIM}). {_DOWNLOAD_HINT}."
            )
        kept = rows[:, self.window.kept_rows(rows.shape[1])]
        pairs = kept.reshape(n * self.window.valid, HUBERT_ROWS_PER_FRAME, HUBERT_DIM)
        return torch.mean(pairs, dim=1, out=out)

    def _encode(self, audio: Tensor, progress: Optional[ProgressCallback]) -> Tensor:
        """``audio`` float32 ``(samples,)`` on the compute device -> ``(frames, 1024)`` float32."""
        window = self.window
        num_frames = num_video_frames(audio.shape[0])
        starts = window.starts(num_frames)
        padded = F.pad(audio, (window.pad_before, window.pad_after))
        features = torch.empty(len(starts) * window.valid, HUBERT_DIM, device=audio.device)
        offsets = torch.arange(window.num_samples, device=audio.device)
        for first in range(0, len(starts), self.max_batch_windows):
            group = starts[first : first + self.max_batch_windows]
            if len(group) == 1:  # a view: onnxruntime reads the samples in place
                windows = padded[group[0] : group[0] + window.num_samples].view(1, -1)
            else:
                windows = padded[torch.tensor(group, device=audio.device)[:, None] + offsets]
            self._valid_features(windows, out=features[first * window.valid : (first + len(group)) * window.valid])
            report(progress, first + len(group), len(starts))
        return features[:num_frames]
