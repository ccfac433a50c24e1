"""The device side of live streams: every stream of one pipeline runs through one :class:`LiveRuntime`.

Two worker threads share the device, in rounds:

* the **motion** thread takes each stream's new speech, runs HuBERT window by window, builds
  every stream's next LMDM window, samples all windows that share a sampler setting as *one
  batch* (one CUDA graph replay for all streams), joins each result into its stream's online
  schedule (:mod:`.schedule`) and stitches the frames all streams release as one batch too
  (:mod:`~ditto_core.motion.stitch_graphs`);
* the **render** thread takes a round's frames from all streams, renders them through the
  warp+decode engine in batches that mix streams (a small ladder of compiled batch sizes, a
  round split among them by what each took at the warm-up, so that neither a lone stream's 5
  frames nor five streams' 25 pay for a 40-frame graph), pastes each stream's frames back
  into its portrait, scales them to the size the client asked for and hands them to a small
  pool of encoder threads.

The two threads overlap one round's rendering with the next round's motion. Every stream gets
at most one LMDM window per round, so a stream that pushes a whole speech at once cannot starve
the others (fair by construction), and a stream whose client stops reading (too many frames
waiting) is skipped until it catches up. A round samples windows for at most ``round_frames``
frames (the largest render batch): when more streams are due at once, as when their speech
arrives in step, the rest go into the next round, which the motion thread samples while the
render thread renders the first, and the next round starts where the last one stopped. The
runtime owns its samplers, engines, HuBERT session and stitcher: the CUDA graphs in them are not
shared with whatever else uses the pipeline.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from contextlib import nullcontext
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Optional, Protocol, Sequence

import torch
from torch import Tensor

from ..audio.audio_features import FPS, SAMPLE_RATE, AudioFeatures, SAMPLES_PER_FRAME
from ..audio.chunking import num_video_frames
from ..audio.hubert import HubertFeatureExtractor
from ..audio.window_graphs import LiveWindowEncoder
from ..compilation import graph_tree_thread
from ..cuda_graphs import device_synchronize, recordings_wait
from ..cuda_streams import owned_stream
from ..errors import DittoError, InputError
from ..models.keypoints import MOTION_DIM
from ..models.lmdm import WINDOW
from ..motion.conditions import build_conditions, build_kp_condition
from ..motion.lmdm_sampler import DDIMSampler
from ..motion.motion_options import MotionOptions
from ..motion.motion_stitch import STREAM_BLINK_FRAMES, StitchChunk, stitch_setup
from ..motion.stitch_graphs import RoundStitcher
from ..precision import lmdm_precision_for
from ..registration.source_info import SourceInfo
from .admission import MAX_LOAD, MAX_STREAMS, DeviceLoad, check_admission, check_max_load, measure_load
from .engine_renderer import BATCH_LADDER, EngineRenderer
from .output_frames import H264Encoder, LiveFrame, encode_jpeg
from .schedule import MotionWindow, OnlineAudio, OnlineMotion
from .stream_state import H264_OUTPUTS, RenderJob, StreamConfig, StreamState

log = logging.getLogger(__name__)

_HUBERT_WINDOWS_PER_ROUND = 2
"""HuBERT windows a stream may encode per round: one more than its one LMDM window needs, so a
stream that pushed a long speech at once catches up without holding the others' round."""

MOTION_PRIORITY = -1
"""CUDA stream priority of the motion thread's work and of the HuBERT windows it waits for
(lower runs first): a round's new windows do not queue behind a round being rendered."""

_ROUNDS_KEPT = 500
"""Recent rounds whose timings :meth:`LiveRuntime.round_stats` summarises."""

MAX_SAMPLERS = 4
"""Sampler settings (steps, precision) a runtime keeps at once: each holds its recorded graphs in
VRAM, and a client could otherwise make one for every steps value it tries."""


class RuntimeStopped(DittoError):
    """The runtime was stopped while a stream was open (the server shut down, the models were unloaded)."""


class RuntimeFailed(DittoError):
    """The runtime's worker threads stopped after an internal error: no stream can open on it."""


class BackpressureError(DittoError):
    """A stream buffers more than it may: its client pushes faster than it reads."""


@dataclass(frozen=True)
class RoundTiming:
    """Host times of one render pass (a round, or rounds joined up to ``render_frames``), for
    :meth:`LiveRuntime.round_stats` (a benchmark's view inside)."""

    windows: int  # LMDM windows that released frames
    frames: int  # frames rendered
    joined: int  # rounds rendered in this pass
    motion_s: float  # the motion thread's (first) round: input, HuBERT, LMDM, stitching launched
    waited_s: float  # queued behind the pass before it on the render thread
    render_s: float  # warp+decode, put-back and host copies of its frames, done
    ended: float  # time.monotonic() when its frames were handed out


class FrameRenderer(Protocol):
    """Renders a round's jobs: returns, per job with motion, its k frames on the host, uint8:
    (k, H, W, 3) RGB; for an H.264 stream either that (its encoder thread converts it) or
    (k, H * 3 // 2, W) packed yuv420p (BT.709, limited range, as
    :func:`~ditto_core.video.colour.rgb_to_yuv420p` makes it on the device, which
    :class:`EngineRenderer` does)."""

    def render(self, jobs: list[RenderJob]) -> list[Tensor]: ...


class LiveRuntime:
    """Shares one pipeline's device among live streams (see the module docstring).

    Args:
        pipeline: a :class:`~ditto_core.pipeline.DittoPipeline` (models, HuBERT).
        max_streams: streams admitted at once; one more is refused with :class:`CapacityError`.
        renderer: frames for a round's jobs; default :class:`EngineRenderer` on the pipeline.
        encoder_threads: JPEG encoders working in parallel.
        compile: compile warp+decode (default: the pipeline's setting).
        batch_ladder: the compiled warp+decode batch sizes (:data:`BATCH_LADDER`).
        sampler_factory: the window sampler for a stream's options (default: a
            :class:`DDIMSampler` per setting, owned by the runtime); streams with the same
            sampler have their windows batched.
        stitch_graphs: replay each round's stitching from a CUDA graph, recorded again whenever
            the open streams change. Off by default: those recordings happen while streams are
            served, and the one H200 run with them on faulted once four streams opened
            (docs/LIVE.md); the batched eager stitching is the default.
        round_frames: frames a round's windows may release (at least one window per round);
            default the largest of ``batch_ladder``. Windows due beyond it wait for the next
            round, which is sampled while this one renders.
        round_interval: seconds between the starts of two motion rounds, at least: windows due
            meanwhile wait and share the next round's LMDM call. A window costs about the same
            for one stream as for twelve (thousands of small kernels), so at full load the LMDM's
            share of the device is its call count; each window waits up to this long more (it
            gave headroom below the device's limit and cost latency at it: docs/LIVE.md). 0 (the
            default): a round starts as soon as the one before it is queued.
        render_frames: frames the render thread renders in one pass: a round already queued
            behind the one it takes joins it while their frames fit (fewer, fuller batches when
            the device falls behind; each round's frames still leave in order). None (the
            default): every round alone.
        max_load: refuse another stream (:class:`CapacityError`) when the open streams and it
            would need more than this share of the device's time in real time, at the cost per
            frame measured over the last rounds (:meth:`load`); None admits up to ``max_streams``
            whatever the cost (a benchmark measuring past what the device sustains). Until a
            second of video has been rendered there is nothing measured: streams opened at once
            on an idle runtime are admitted on ``max_streams`` alone.
    """

    def __init__(
        self, pipeline, max_streams: int = MAX_STREAMS, renderer: Optional[FrameRenderer] = None,
        encoder_threads: int = 4, compile: Optional[bool] = None, batch_ladder: tuple[int, ...] = BATCH_LADDER,
        sampler_factory: Optional[Callable[[MotionOptions], DDIMSampler]] = None, stitch_graphs: bool = False,
        round_frames: Optional[int] = None, max_load: Optional[float] = MAX_LOAD,
        render_frames: Optional[int] = None, round_interval: float = 0.0,
    ) -> None:
        if not (isinstance(max_streams, int) and max_streams >= 1):
            raise InputError(f"max_streams must be a positive integer, got {max_streams!r}.")
        check_max_load(max_load)
        self.max_load = max_load
        round_frames = max(batch_ladder) if round_frames is None else round_frames
        if not (isinstance(round_frames, int) and round_frames >= 1):
            raise InputError(f"round_frames must be a positive integer, got {round_frames!r}.")
        self.round_frames = round_frames
        if not (render_frames is None or isinstance(render_frames, int) and render_frames >= 1):
            raise InputError(f"render_frames must be a positive integer or None, got {render_frames!r}.")
        self.render_frames = render_frames
        if not (isinstance(round_interval, (int, float)) and not isinstance(round_interval, bool)
                and 0 <= round_interval <= 1):
            raise InputError(f"round_interval must be seconds in [0, 1], got {round_interval!r}.")
        self.round_interval = float(round_interval)
        self.pipeline = pipeline
        self.device = pipeline.device
        self.max_streams = max_streams
        models = pipeline.models
        offline = pipeline.hubert
        # Our PyTorch HuBERT keeps no state between calls, so streams share the pipeline's
        # module (one copy of 315 M weights in VRAM); an onnxruntime session binds its own
        # input/output buffers, so the runtime opens a session of its own from the same file.
        self.hubert = offline if offline.backend == "torch" else HubertFeatureExtractor(offline.model_path, offline.device)
        self.renderer = renderer or EngineRenderer(models, pipeline.compile if compile is None else compile, batch_ladder)
        self._samplers: dict[tuple, DDIMSampler] = {}
        # The sampler settings (_sampler_key) the warm-up recorded, the only ones served after it;
        # None before a warm-up (nothing recorded ahead: a stream's sampler records as it comes).
        self._served: Optional[frozenset] = None
        if sampler_factory is not None:
            self.sampler = sampler_factory
        self.hubert_windows = LiveWindowEncoder(self.hubert, priority=MOTION_PRIORITY)
        self.stitcher = RoundStitcher(models.stitch_network, self.device, cuda_graphs=stitch_graphs)
        with torch.inference_mode():
            silent = torch.zeros(self.hubert.window.num_samples)
            self._silence_window = self.hubert.encode_window(silent)  # (5, 1024): every all-zero window's
        self._motion_stream, self._render_stream = self._worker_streams()
        self._encoders = ThreadPoolExecutor(encoder_threads, thread_name_prefix="ditto-live-encode")
        self._streams: dict[int, StreamState] = {}
        self._next_id = 1
        self._wake = threading.Condition()
        self._render_queue: deque = deque()  # (jobs, motion-stream event) or a callable
        self._render_ready = threading.Condition()
        self._stopping = False
        self._stop_reason = ""  # shutdown()'s reason, told to streams that try to open afterwards
        self._error: Optional[BaseException] = None
        self._last_sampled = 0  # id of the last stream a round sampled: the next round starts after it
        self._deferred = False  # the last round left due windows to the next one
        self._rounds: deque = deque(maxlen=_ROUNDS_KEPT)  # RoundTiming of recent rounds
        self._threads = [
            threading.Thread(target=self._motion_loop, name="ditto-live-motion", daemon=True),
            threading.Thread(target=self._render_loop, name="ditto-live-render", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _worker_streams(self) -> tuple[Optional[torch.cuda.Stream], Optional[torch.cuda.Stream]]:
        """(motion, render) CUDA streams of the two worker threads; None off CUDA.

        Each thread has a stream of its own: the motion thread's windows (high priority) do not
        queue behind a round being rendered, and each thread waits only for its own work.
        """
        if self.device.type != "cuda":
            return None, None
        return owned_stream(self, self.device, MOTION_PRIORITY), owned_stream(self, self.device)

    # -- streams ------------------------------------------------------------------------------

    @property
    def active_streams(self) -> int:
        with self._wake:
            return len(self._streams)

    def silence_features(self, frames: int) -> Tensor:
        """HuBERT features of ``frames`` frames of silence, as Ditto's online buffer starts: (frames, 1024).

        Offline ``wav2feat`` of zeros: every window is all zeros, so its rows repeat every window.
        """
        if num_video_frames(frames * SAMPLES_PER_FRAME) != frames:
            raise InputError(f"a lead-in of {frames} frames is not a whole number of HuBERT frames")
        reps = -(-frames // self._silence_window.shape[0])
        return self._silence_window.repeat(reps, 1)[:frames]

    def sampler(self, options: MotionOptions) -> DDIMSampler:
        """The shared sampler for ``options``' steps and precision (called holding ``_wake``). At most
        :data:`MAX_SAMPLERS` are kept, each with its recorded graphs: one no open stream uses makes
        room for a new one; when all are in use, a stream asking for another is refused."""
        key = self._sampler_key(options)
        steps, precision, _ = key
        if key not in self._samplers and len(self._samplers) >= MAX_SAMPLERS:
            used = {id(state.sampler) for state in self._streams.values()}
            for old in [k for k, sampler in self._samplers.items() if id(sampler) not in used]:
                del self._samplers[old]
            if len(self._samplers) >= MAX_SAMPLERS:
                in_use = ", ".join(str(k[0]) for k in self._samplers)
                raise InputError(f"MotionOptions.steps={options.steps}: the open streams already use {MAX_SAMPLERS} "
                                 f"sampler settings (steps {in_use}); use one of those steps")
        if key not in self._samplers:
            # Whole windows recorded: a stream samples one every 5 frames, and the LMDM's windows
            # are a large share of the device at many streams (a pipeline's clips record steps).
            self._samplers[key] = DDIMSampler(
                self.pipeline.models.lmdm, steps, precision=precision, compile=options.sampler_compile,
                graph_span="window",
            )
        return self._samplers[key]

    def _sampler_key(self, options: MotionOptions) -> tuple:
        """What makes two streams' samplers differ: (steps, LMDM precision, compiled)."""
        precision = lmdm_precision_for(options.sampler_precision, self.pipeline.models.dtype)
        return options.steps, precision, options.sampler_compile

    @property
    def served_steps(self) -> Optional[list[int]]:
        """The DDIM steps streams may use: those the warm-up recorded; None before a warm-up (any)."""
        return None if self._served is None else sorted({key[0] for key in self._served})

    def _check_served(self, options: MotionOptions) -> None:
        """Refuse a sampler setting the warm-up did not record: its first windows would compile
        and record CUDA graphs on the motion thread while the open streams wait (seconds, more
        the first time), and recording beside the render's replays is what once faulted a runtime."""
        served = self._served
        if served is None or self._sampler_key(options) in served:
            return
        served_steps = self.served_steps
        steps = ", ".join(map(str, served_steps))
        if options.steps not in served_steps:
            raise InputError(
                f"MotionOptions.steps={options.steps}: this live runtime serves steps {steps}, the ones its warm-up "
                "recorded (a stream with other steps would compile and record its sampler while the open streams "
                f"wait). Open the stream with steps {steps}, or warm the runtime up with {options.steps} as well "
                "(serve --steps, Publish Live Avatar's steps).")
        raise InputError(
            f"MotionOptions.sampler_precision={options.sampler_precision!r}, sampler_compile={options.sampler_compile}: "
            "this live runtime's warm-up recorded its sampler with other settings; open the stream with the options "
            "the runtime was warmed up with.")

    def open_state(
        self, source: SourceInfo, options: MotionOptions, config: StreamConfig, deliver: Callable[[object], None]
    ) -> StreamState:
        """Admit a stream (or raise :class:`CapacityError`) and build its schedule state."""
        if self._error is not None:
            raise RuntimeFailed(f"the live runtime stopped after an internal error ({self._error}); restart the "
                                "server (its log has the traceback)")
        if options.fade_type:
            raise InputError('MotionOptions.fade_type: fades need the clip length; use fade_type="" for streams.')
        self._check_served(options)
        models = self.pipeline.models
        options = self.pipeline.with_blink_table(options)
        with self._wake:
            if self._stopping:  # its workers are gone: a stream admitted now would wait forever
                raise RuntimeStopped(self._stop_reason)
            check_admission(len(self._streams), self.max_streams, self.load(), self.max_load, FPS)
            stream_id = self._next_id
            self._next_id += 1
            # The stream's own tensors are made on the motion stream, which uses and frees them;
            # the avatar's are read by both workers, whichever thread lets go of them last.
            workers = [w for w in (self._motion_stream, self._render_stream) if w is not None]
            caller = torch.cuda.current_stream(self.device) if workers else None
            with _on_stream(self._motion_stream), torch.inference_mode():
                if caller is not None:
                    self._motion_stream.wait_stream(caller)  # the avatar may have been made there
                source = source.to(self.device)
                generator = torch.Generator(self.device).manual_seed(options.seed)
                sampler = self.sampler(options)
                noise = torch.randn(sampler.noise_shape(1), generator=generator, device=self.device)
                stitch = stitch_setup(source, options, models.stitch_network, STREAM_BLINK_FRAMES)

                def build_cond(features: Tensor, first_frame: int) -> Tensor:
                    audio = AudioFeatures(features=features, duration_s=features.shape[0] / FPS)
                    return build_conditions(audio, source, options, models.cond_dim, first_frame=first_frame)

                motion = OnlineMotion(
                    self.silence_features(config.overlap), build_kp_condition(source), build_cond,
                    overlap=config.overlap, smoothing=options.smo_k_d, fix_kp_cond=options.fix_kp_cond,
                )
            for worker in workers:
                for tensor in source.tensors():
                    tensor.record_stream(worker)
            if workers:  # the render thread reads the avatar (and its upload) too
                self._render_stream.wait_stream(self._motion_stream)
            state = StreamState(
                id=stream_id, source=source, options=options, config=config, sampler=sampler,
                audio=OnlineAudio(self.hubert.window), motion=motion, generator=generator, noise=noise, stitch=stitch,
                deliver=deliver, next_silence=time.monotonic(),
            )
            self._streams[stream_id] = state
            self._wake.notify_all()
        return state

    def load(self) -> Optional[DeviceLoad]:
        """What the streams cost the device, from the last rounds (:func:`~.admission.measure_load`; any thread)."""
        return measure_load(list(self._rounds), time.monotonic(), FPS)  # list(): one step; the render thread appends

    def push(self, state: StreamState, samples_16k: Tensor) -> None:
        """Queue speech for a stream (any thread); raises :class:`BackpressureError` past the buffer limit."""
        now = time.monotonic()
        with state.lock:
            if state.end_requested:
                raise InputError("audio pushed after end(): the stream is finishing; open a new one for new speech.")
            limit = state.config.max_buffered_seconds
            seconds = samples_16k.shape[0] / SAMPLE_RATE
            if seconds > limit:  # never fits, however fast the client reads
                raise InputError(f"one push of {seconds:.1f} s of speech is more than a stream buffers ({limit:g} s): "
                                 "push it in smaller pieces.")
            if state.buffered_seconds() + seconds > limit:
                raise BackpressureError(
                    f"the stream already buffers {state.buffered_seconds():.1f} s of speech that is not animated "
                    f"yet (limit {limit:g} s): push audio no faster than real time, or read the frames."
                )
            state.pending.append((samples_16k, now))
            state.pending_samples += samples_16k.shape[0]
            state.next_silence = now + state.audio.hop / SAMPLE_RATE
        self._notify()

    def request_end(self, state: StreamState) -> None:
        with state.lock:
            state.end_requested = True
        self._notify()

    def request_clear(self, state: StreamState) -> None:
        with state.lock:
            state.pending, state.pending_samples = [], 0
            state.clear_requested = True
            state.epoch += 1
            state.backlog = 0
            state.next_silence = time.monotonic()
        self._notify()

    def taken(self, state: StreamState) -> None:
        """The client took one frame (called by the stream's iterator)."""
        with state.lock:
            state.backlog = max(0, state.backlog - 1)
            state.frames_delivered += 1
            if state.backlog < state.config.max_backlog_frames:
                state.stalled_since = None  # reading again (the motion thread may be slow to notice)
        self._notify()

    def close_state(self, state: StreamState) -> None:
        """Forget a stream; frames in flight are dropped on delivery."""
        with self._wake:
            state.closed = True
            self._streams.pop(state.id, None)
            self._wake.notify_all()
        if state.video_encoder is not None:
            state.video_encoder.close()

    def stats(self, state: StreamState) -> dict:
        lat = sorted(state.chunk_latency)
        load = self.load()
        return {
            "stream": state.id,
            "frames_out": state.motion.frames_out,
            "frames_delivered": state.frames_delivered,
            "windows": state.motion.windows_done,
            "silence_windows": state.silence_windows,
            "backlog_frames": state.backlog,
            "buffered_speech_s": round(state.buffered_seconds(), 3),
            "first_frame_latency_s": state.first_frame_latency,
            "chunk_latency_p50_s": quantile(lat, 0.5),
            "chunk_latency_p95_s": quantile(lat, 0.95),
            "active_streams": self.active_streams,
            "max_streams": self.max_streams,
            "device_load": None if load is None else round(load.busy, 3),
        }

    def round_stats(self) -> dict:
        """Recent render passes (up to the last :data:`_ROUNDS_KEPT`; a pass is one round, or
        several joined, ``render_frames``): how many, the frames, windows and rounds each held,
        and p50/p95 of each part of their time, in milliseconds."""
        rounds = list(self._rounds)
        if not rounds:
            return {"rounds": 0}

        def summary(values: list[float], scale: float = 1.0) -> dict:
            values = sorted(values)
            return {"p50": round(scale * quantile(values, 0.5), 2), "p95": round(scale * quantile(values, 0.95), 2),
                    "max": round(scale * values[-1], 2)}

        return {
            "rounds": len(rounds),
            "frames": summary([r.frames for r in rounds]),
            "windows": summary([r.windows for r in rounds]),
            "joined": summary([r.joined for r in rounds]),
            **{f"{part}_ms": summary([getattr(r, f"{part}_s") for r in rounds], 1000.0)
               for part in ("motion", "waited", "render")},
        }

    def clear_round_stats(self) -> None:
        self._rounds.clear()

    def stalled_for(self, state: StreamState) -> float:
        """Seconds the stream has been paused because its client does not take frames."""
        since = state.stalled_since
        return 0.0 if since is None else time.monotonic() - since

    def shutdown(self, reason: str = "the live server is shutting down") -> None:
        """Stop the workers; streams still open get :class:`RuntimeStopped` with ``reason``."""
        with self._wake:
            self._stopping, self._stop_reason = True, reason
            streams = list(self._streams.values())
            self._streams.clear()
            self._wake.notify_all()
        with self._render_ready:
            self._render_ready.notify_all()
        for state in streams:
            state.deliver(RuntimeStopped(reason))
        for thread in self._threads:
            thread.join(timeout=10)
        # Frames already handed out are encoded, not cancelled: a stream's client awaits them in
        # order before the RuntimeStopped behind them, and a cancelled one would end its
        # iteration with a bare CancelledError (an abnormal close, the reason never told).
        self._encoders.shutdown(wait=False)

    def _notify(self) -> None:
        with self._wake:
            self._wake.notify_all()

    # -- motion thread ------------------------------------------------------------------------

    def _motion_loop(self) -> None:
        try:
            with _on_stream(self._motion_stream), torch.inference_mode():
                while True:
                    with self._wake:
                        if self._stopping:
                            return
                        streams = list(self._streams.values())
                    began = time.monotonic()
                    jobs = self._motion_round(streams)
                    if jobs:
                        self._queue_render(jobs, began)
                        if self.round_interval:  # the next round no sooner than round_interval after this one
                            with self._wake:
                                pause = began + self.round_interval - time.monotonic()
                                if pause > 0 and not self._stopping:
                                    self._wake.wait_for(lambda: self._stopping, timeout=pause)
                    elif not self._deferred:
                        with self._wake:
                            if not self._stopping:
                                self._wake.wait(timeout=0.01)
        except BaseException as error:  # a bug, not bad input: every stream hears of it
            self._fail_all(error)

    def _fail_all(self, error: BaseException) -> None:
        log.exception("Ditto live runtime failed", exc_info=error)
        self._error = error
        with self._wake:
            streams = list(self._streams.values())
            self._streams.clear()
        for state in streams:
            state.deliver(DittoError(f"the live runtime failed: {type(error).__name__}: {error}"))

    def _take_input(self, state: StreamState, now: float) -> list[Tensor]:
        """Move pushed speech into the stream's schedule; returns the complete windows for HuBERT."""
        with state.lock:
            pending, state.pending, state.pending_samples = state.pending, [], 0
            end, clear = state.end_requested, state.clear_requested
            state.clear_requested = False
            if state.backlog >= state.config.max_backlog_frames:
                state.stalled_since = state.stalled_since or now
            else:
                state.stalled_since = None
        if clear:
            # Speech from the first frame not yet released is gone; frames keep their positions.
            resume = state.audio.clear()
            cut = min(resume, state.motion.frames_out * SAMPLES_PER_FRAME)
            state.speech.truncate(cut)
            state.speech.append(torch.zeros(max(0, resume - state.speech.end)))
            state.push_times.clear()
        if pending:
            # One join a round however many pieces the client sent (each append copies the buffer).
            position = state.audio.received
            joined = torch.cat([samples for samples, _ in pending])
            state.audio.push(joined)
            state.speech.append(joined)
            for samples, pushed in pending:
                position += samples.shape[0]
                state.push_times.append((position, pushed))
        if end and not state.audio.ended:
            state.audio.end()
        idle = state.config.idle and not state.audio.ended and not pending and not state.audio.has_window()
        if idle and now >= state.next_silence:
            silence = torch.zeros(state.audio.hop)
            state.audio.push(silence)
            state.speech.append(silence)
            state.push_times.append((state.audio.received, now))
            state.next_silence = now + state.audio.hop / SAMPLE_RATE
            state.silence_windows += 1
        windows = []
        # HuBERT runs ahead of the stream's LMDM by at most its next two windows' feature rows:
        # speech pushed faster than it is animated (a TTS engine's, most often) waits as samples,
        # 4 bytes each, rather than piling up as 1024 features a frame in a buffer each round copies.
        wanted = WINDOW + state.motion.hop
        for _ in range(_HUBERT_WINDOWS_PER_ROUND):
            ahead = state.motion.buffered_rows + len(windows) * state.audio.window.valid
            if not state.audio.has_window() or ahead >= wanted:
                break
            needed = state.audio.windows_done * state.audio.hop + state.audio.window.num_samples - state.audio.lead_in
            rows_end = (state.audio.windows_done + 1) * state.audio.window.valid
            state.window_times.append((rows_end, self._arrival(state, needed, now)))
            windows.append(state.audio.next_window())
        return windows

    def _take_features(self, state: StreamState, features) -> None:
        """Hand a stream its windows' HuBERT features ``(k, valid, 1024)``, in order; end its motion after the last."""
        for window in features:
            state.motion.push(window)
        if state.audio.ended and not state.audio.has_window() and not state.motion.ended:
            state.motion.end()

    @staticmethod
    def _arrival(state: StreamState, sample: int, now: float) -> float:
        """When speech sample position ``sample`` had arrived (now, for the zeros of the end)."""
        while state.push_times and state.push_times[0][0] < sample:
            state.push_times.popleft()
        return state.push_times[0][1] if state.push_times else now

    @staticmethod
    def _window_ready(state: StreamState, rows_end: int, now: float) -> float:
        """When the speech of an LMDM window reading feature rows up to ``rows_end`` had arrived:
        that of the HuBERT window giving its newest row (now, past the last one: the end's
        zeros). A window moves the schedule on ``80 - overlap`` rows, so it may read several
        HuBERT windows' new rows (overlap < 75) or share one with the next (overlap > 75);
        the HuBERT windows whose rows it read to the last are forgotten."""
        times = state.window_times
        while len(times) > 1 and times[0][0] < rows_end:
            times.popleft()
        if not times:
            return now
        last_row, arrival = times[0]
        if last_row <= rows_end:
            times.popleft()
        return arrival

    def _motion_round(self, streams: list[StreamState]) -> list[RenderJob]:
        now = time.monotonic()
        windows: list[tuple[StreamState, MotionWindow]] = []
        jobs: list[RenderJob] = []
        speech: list[tuple[StreamState, list[Tensor]]] = []
        for state in streams:
            try:
                speech.append((state, self._take_input(state, now)))
            except DittoError as error:
                self._fail(state, error)
        # Every stream's new HuBERT windows in one batch (one graph replay on CUDA).
        batch = [w for _, ws in speech for w in ws]
        sizes = [len(ws) for _, ws in speech]
        features = self.hubert_windows.encode(torch.stack(batch)).split(sizes) if batch else [()] * len(speech)
        due: list[StreamState] = []
        for (state, _), mine in zip(speech, features):
            try:
                self._take_features(state, mine)
                if state.stalled_since is None and not state.finished:
                    due.append(state)
            except DittoError as error:
                self._fail(state, error)
        frames, self._deferred = 0, False
        for state in self._from_last_sampled(due):
            try:
                valid = state.motion.next_valid()
                if valid is not None:
                    if windows and frames + valid > self.round_frames:
                        self._deferred = True  # its conditions are built when a round takes it
                        continue
                    frames += valid
                    windows.append((state, state.motion.next_window()))
                    self._last_sampled = state.id
                elif state.motion.finished:
                    state.finished = True
                    jobs.append(RenderJob(state, state.epoch, state.motion.frames_out, None, torch.zeros(0, 640),
                                          now, final=True))
            except DittoError as error:
                self._fail(state, error)
        groups: dict[int, list[tuple[StreamState, MotionWindow]]] = {}
        for state, window in windows:
            groups.setdefault(id(state.sampler), []).append((state, window))
        released: list[tuple[RenderJob, Tensor]] = []
        for group in groups.values():
            try:
                preds = self._sample(group)
            except DittoError as error:
                for state, _ in group:
                    self._fail(state, error)
                continue
            for (state, window), pred in zip(group, preds):
                try:
                    release = self._release(state, window, pred, now)
                except DittoError as error:
                    self._fail(state, error)
                    continue
                if release is not None:
                    released.append(release)
        return jobs + self._stitch_round(streams, released)

    def _from_last_sampled(self, streams: list[StreamState]) -> list[StreamState]:
        """``streams`` (in id order) starting after the last one a round sampled: when a round
        cannot take every due window, the ones left out go first in the next."""
        later = [state for state in streams if state.id > self._last_sampled]
        return later + [state for state in streams if state.id <= self._last_sampled]

    def _sample(self, group: list[tuple[StreamState, MotionWindow]]) -> Tensor:
        """One batched DDIM call for windows of several streams: (B, 80, 265).

        The batch is padded (with copies of its last window) to a power of two, so a sampler sees
        a handful of shapes, each recorded (and compiled) once, whatever the number of streams.
        """
        sampler = group[0][0].sampler
        kp = torch.cat([w.kp_cond for _, w in group])
        cond = torch.stack([w.cond for _, w in group])
        x_T = torch.cat([torch.randn((1, WINDOW, MOTION_DIM), generator=s.generator, device=self.device)
                         for s, _ in group])
        noise = torch.cat([s.noise for s, _ in group], dim=1)
        n = len(group)
        size = lmdm_batch(n)
        if size > n:
            kp, cond, x_T = (torch.cat([t, t[-1:].expand(size - n, *t.shape[1:])]) for t in (kp, cond, x_T))
            noise = torch.cat([noise, noise[:, -1:].expand(-1, size - n, -1, -1)], dim=1)
        return sampler.sample(kp, cond, x_T, noise)[:n]

    def warm_up(self, source: SourceInfo, options: MotionOptions, several_avatars: bool = True,
                steps: Optional[Sequence[int]] = None) -> None:
        """Record every sampler batch size up to ``max_streams`` and compile every render size, so
        that no stream waits for a compilation (call before serving; minutes when nothing is cached).
        ``several_avatars=False`` says every stream will show ``source``: for an image, the renders'
        form with a volume per frame (which only a video or a round of several avatars uses) is
        then not compiled, half the engines' warm-up. ``steps``: the DDIM steps to record a sampler
        for (default ``options.steps``); afterwards streams may use these steps only (their
        sampler's other settings as in ``options``), so that nothing records while streams are
        served. Off CUDA there is no graph to record, and only the steps are set."""
        steps = (options.steps,) if steps is None else distinct_steps(steps)
        settings = [replace(options, steps=n) for n in steps]
        for setting in settings:
            setting.validate()
        self._served = frozenset(map(self._sampler_key, settings))
        if self.device.type != "cuda":
            return
        # Recorded here whatever runs beside (a compile of the offline engine): not while serving.
        with torch.inference_mode(), recordings_wait():
            device_source = source.to(self.device)  # uploaded once: the samplers' condition and the renders'
            kp = build_kp_condition(device_source)
            cond = torch.zeros(1, WINDOW, self.pipeline.models.cond_dim, device=self.device)
            for setting in settings:
                sampler = self.sampler(setting)
                size = 1
                while True:
                    x = torch.zeros(size, WINDOW, MOTION_DIM, device=self.device)
                    sampler.sample(kp.expand(size, -1), cond.expand(size, -1, -1), x,
                                   torch.zeros(sampler.noise_shape(size), device=self.device))
                    if size >= self.max_streams:
                        break
                    size = lmdm_batch(size + 1)
            self.hubert_windows.warm_up(_HUBERT_WINDOWS_PER_ROUND * self.max_streams)
        # The worker threads' streams use what was recorded and uploaded here on this one.
        device_synchronize(self.device)
        if hasattr(self.renderer, "warm_up"):
            per_frame = several_avatars or len(device_source) > 1
            self._on_render_thread(lambda: self._warm_up_renderer(device_source, per_frame))

    def _warm_up_renderer(self, source: SourceInfo, per_frame_volumes: bool) -> None:
        """The render engines' compiles and graphs, on the render thread, where their graph trees
        live. As the samplers' recordings above, their first calls wait for a compile elsewhere to
        end (``recordings_wait``) rather than render eagerly and leave the recording to a streamed
        round."""
        with recordings_wait():
            self.renderer.warm_up(source, per_frame_volumes=per_frame_volumes)

    def _release(
        self, state: StreamState, window: MotionWindow, pred: Tensor, now: float
    ) -> Optional[tuple[RenderJob, Tensor]]:
        """Join a sampled window into its stream: the job of the frames it releases (its motion
        still to be stitched) and their (k, 265) motion vectors; None when it releases none."""
        first = state.motion.frames_out
        vectors = state.motion.accept(window, pred)
        ready = self._window_ready(state, window.rows_end, now)
        if vectors.shape[0] == 0:
            return None
        start = first * SAMPLES_PER_FRAME
        audio = state.speech.read(start, vectors.shape[0] * SAMPLES_PER_FRAME).view(-1, SAMPLES_PER_FRAME)
        state.speech.discard_before(start + audio.numel())
        with state.lock:
            state.backlog += vectors.shape[0]
        return RenderJob(state, state.epoch, first, None, audio, ready), vectors

    def _stitch_round(self, streams: list[StreamState], released: list[tuple[RenderJob, Tensor]]) -> list[RenderJob]:
        """Stitch every stream's released frames of a round as one batch; the jobs with their motion."""
        if not released:
            return []
        slots = {state.id: slot for slot, state in enumerate(streams)}
        chunks = [StitchChunk(slots[job.stream.id], job.first_frame, vectors, job.stream.motion.reference)
                  for job, vectors in released]
        try:
            motions = self.stitcher.stitch([state.stitch for state in streams], chunks)
        except DittoError as error:
            for job, _ in released:
                self._fail(job.stream, error)
            return []
        return [replace(job, motion=motion) for (job, _), motion in zip(released, motions)]

    def _fail(self, state: StreamState, error: BaseException) -> None:
        log.warning("Ditto live stream %d failed: %s", state.id, error)
        self.close_state(state)
        state.deliver(error)

    # -- render thread ------------------------------------------------------------------------

    def _queue_render(self, jobs: list[RenderJob], began: float) -> None:
        """Hand a round's jobs to the render thread (``began``: when its motion round started)."""
        made = None
        if self._render_stream is not None:
            for job in jobs:
                if job.motion is not None:  # freed by the render thread: not reused before it is done
                    for tensor in (job.motion.kp_source, job.motion.kp_driving, job.motion.source_index):
                        tensor.record_stream(self._render_stream)
            made = torch.cuda.Event()
            made.record(self._motion_stream)
        jobs = (jobs, made, began, time.monotonic())
        with self._render_ready:
            # Two rounds in flight at most: the motion thread waits rather than run ahead of the device.
            while len(self._render_queue) >= 2 and not self._stopping:
                self._render_ready.wait(timeout=0.1)
            self._render_queue.append(jobs)
            self._render_ready.notify_all()

    def _render_loop(self) -> None:
        try:
            with graph_tree_thread(self.device), _on_stream(self._render_stream), torch.inference_mode():
                while True:
                    with self._render_ready:
                        while not self._render_queue and not self._stopping:
                            self._render_ready.wait(timeout=0.1)
                        if self._stopping:
                            return
                        jobs = self._render_queue.popleft()
                        if not callable(jobs):
                            jobs = self._join_queued(*jobs)
                        self._render_ready.notify_all()
                    if callable(jobs):  # work that must run on this thread (warm_up)
                        jobs()
                    else:
                        jobs, made, joined, began, queued = jobs
                        for event in made:
                            torch.cuda.current_stream(self.device).wait_event(event)
                        started = time.monotonic()
                        frames = self._render_round(jobs)
                        ended = time.monotonic()
                        self._rounds.append(RoundTiming(
                            windows=sum(job.motion is not None for job in jobs), frames=frames, joined=joined,
                            motion_s=queued - began, waited_s=started - queued, render_s=ended - started,
                            ended=ended))
        except BaseException as error:
            self._fail_all(error)

    def _join_queued(self, jobs: list[RenderJob], made, began: float, queued: float) -> tuple:
        """The round taken and the rounds queued behind it whose frames fit in ``render_frames``,
        as one pass: (jobs in order, their motion-stream events, rounds joined, ``began`` and
        ``queued`` of the first). Called holding ``_render_ready``."""
        events = [made] if made is not None else []
        frames, joined = _motion_frames(jobs), 1
        while self.render_frames is not None and self._render_queue and not callable(self._render_queue[0]):
            more, more_made, _, _ = self._render_queue[0]
            if frames + _motion_frames(more) > self.render_frames:
                break
            self._render_queue.popleft()
            jobs, frames, joined = jobs + more, frames + _motion_frames(more), joined + 1
            events += [more_made] if more_made is not None else []
        return jobs, events, joined, began, queued

    def _on_render_thread(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the render thread (where the engines' CUDA graphs live) and wait for it."""
        done, failure = threading.Event(), []

        def task() -> None:
            try:
                fn()
            except BaseException as error:  # handed back to the caller
                failure.append(error)
            finally:
                done.set()

        with self._render_ready:
            self._render_queue.append(task)
            self._render_ready.notify_all()
        while not done.wait(timeout=0.5):
            if self._error is not None:
                raise RuntimeFailed(f"the live runtime stopped after an internal error ({self._error}) before its "
                                    "warm-up finished")
            if self._stopping:
                raise RuntimeStopped(f"{self._stop_reason}: the runtime stopped before its warm-up finished")
        if failure:
            raise failure[0]

    def _render_round(self, jobs: list[RenderJob]) -> int:
        """Render a round's jobs and hand out their frames; returns how many frames it rendered."""
        live = [j for j in jobs if j.motion is not None and not j.stream.closed and j.epoch == j.stream.epoch]
        images = self.renderer.render(live) if live else []
        done = time.monotonic()
        by_job = dict(zip(map(id, live), images))
        for job in jobs:
            state = job.stream
            if state.closed:
                continue
            try:
                if job.motion is not None and job.epoch == state.epoch:  # frames from before a clear are dropped
                    latency = done - job.ready_since
                    state.chunk_latency.append(latency)
                    if state.first_frame_latency is None:
                        state.first_frame_latency = latency
                    frames = by_job[id(job)]
                    for k in range(frames.shape[0]):
                        self._deliver_frame(state, job, k, frames[k])
                if job.final:  # whatever the epoch: a clear after end still ends the stream
                    state.deliver(None)
            except Exception as error:  # noqa: BLE001 - one stream's output failing ends that stream only
                self._fail(state, error)
        return sum(image.shape[0] for image in images)

    def _deliver_frame(self, state: StreamState, job: RenderJob, k: int, image: Tensor) -> None:
        index = job.first_frame + k
        pcm = (job.audio[k].clamp(-1, 1) * 32767).round().to(torch.int16)
        frame = LiveFrame(index=index, pts=index / FPS, audio=pcm)
        if state.config.output == "rgb":
            frame.image = image
            state.deliver((job.epoch, frame))
            return
        if state.config.output in H264_OUTPUTS:
            if state.video_encoder is None:
                state.video_encoder = H264Encoder(*state.frame_size, fragmented=state.config.output == "fmp4")
                if state.closed:  # closed while it was made: close_state did not see it
                    state.video_encoder.close()
            future = state.video_encoder.submit(frame, image, job.epoch)
            if future is None:  # the stream closed meanwhile
                return
        else:
            future = self._encoders.submit(encode_jpeg, frame, image, state.config.quality)
        state.deliver((job.epoch, future))


def _on_stream(stream: Optional[torch.cuda.Stream]):
    """``torch.cuda.stream(stream)``, or nothing off CUDA."""
    return nullcontext() if stream is None else torch.cuda.stream(stream)


def _motion_frames(jobs: list[RenderJob]) -> int:
    """Frames a round's jobs render (jobs without motion only end their stream)."""
    return sum(job.motion.kp_driving.shape[0] for job in jobs if job.motion is not None)


def quantile(ordered: list, q: float):
    """The ``q`` quantile of an ascending list (the nearest rank at or below), None when empty: how
    the runtime's stats (and the live benchmark's summaries of them) pick p50 and p95."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def distinct_steps(steps: Sequence[int]) -> tuple[int, ...]:
    """``steps`` without repeats, in order: the 1 to :data:`MAX_SAMPLERS` step counts a runtime
    may be warmed up to serve (:meth:`LiveRuntime.warm_up`)."""
    steps = tuple(dict.fromkeys(steps))
    if not 1 <= len(steps) <= MAX_SAMPLERS:
        raise InputError(f"steps: a live runtime serves 1 to {MAX_SAMPLERS} step counts, got {list(steps)}.")
    return steps


def lmdm_batch(windows: int) -> int:
    """The sampler batch size ``windows`` windows are padded to: the next power of two."""
    return 1 << max(0, windows - 1).bit_length()
