"""Batch jobs: one JSON object a line of ``jobs.jsonl``, checked before any model is loaded.

A line reads ``{"source": "portrait.jpg", "audio": "speech.wav", "output": "talk.mp4",
"options": {"steps": 25, "seed": 0, "crf": 18}}``. Relative paths are taken from the folder
of the jobs file; ``output`` is a file name inside the batch's output folder. ``options`` are
the fields of :class:`~ditto_core.motion.motion_options.MotionOptions` and
:class:`~ditto_core.registration.options.RegistrationOptions` by name, plus ``crf``,
``preset``, ``max_seconds`` (render only the first seconds of speech) and ``max_frames``
(only the first frames: a preview).

A bad line (not JSON, a missing file, an unknown or out-of-range option, a second job writing
the same output) becomes a :class:`JobLineError` naming the line and the field; the other lines
still run. Each good line gets a hash over everything that decides its video (the bytes of
both inputs, every option, the pipeline settings); a finished job leaves ``<output>.json``
beside its MP4 with that hash and the MP4's digest, and a rerun skips the job while both match.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from ..atomic_files import atomic_write_bytes, discard, file_sha256, parse_temp_name
from ..errors import InputError
from ..motion.motion_options import MotionOptions
from ..registration.options import RegistrationOptions
from ..video.encoder_settings import check_encoder_options

JOB_FORMAT = "ditto-batch-job"
JOB_VERSION = 1  # part of every job hash: a change of what a job means re-renders old outputs
SIDECAR_SUFFIX = ".json"

ENCODE_DEFAULTS = {"crf": 18, "preset": "medium"}
CLIP_KEYS = ("max_seconds", "max_frames")
# Options a JSON line cannot express (tensors) or that the batch decides itself.
_NOT_JOB_OPTIONS = {"delta_eye_arr", "detect_face"}
MOTION_KEYS = tuple(f.name for f in dataclasses.fields(MotionOptions) if f.name not in _NOT_JOB_OPTIONS)
REGISTRATION_KEYS = tuple(f.name for f in dataclasses.fields(RegistrationOptions) if f.name not in _NOT_JOB_OPTIONS)
OPTION_KEYS = (*MOTION_KEYS, *REGISTRATION_KEYS, *ENCODE_DEFAULTS, *CLIP_KEYS)
_LINE_KEYS = ("source", "audio", "output", "options")


@dataclass(frozen=True)
class Job:
    """One checked line of a jobs file: everything a worker needs, as plain picklable data."""

    line: int  # 1-based line number in the jobs file
    source: Path  # portrait image or video, absolute
    audio: Path  # speech track, absolute
    output: Path  # target MP4, absolute, inside the output folder
    options: dict[str, Any] = field(default_factory=dict)  # as given on the line
    job_hash: str = ""

    @property
    def name(self) -> str:
        return self.output.name

    def motion_options(self) -> MotionOptions:
        return MotionOptions(**{k: v for k, v in self.options.items() if k in MOTION_KEYS})

    def registration_options(self, detect_face: bool) -> RegistrationOptions:
        picked = {k: v for k, v in self.options.items() if k in REGISTRATION_KEYS}
        return RegistrationOptions(detect_face=detect_face, **picked).validate()

    @property
    def crf(self) -> int:
        return self.options.get("crf", ENCODE_DEFAULTS["crf"])

    @property
    def preset(self) -> str:
        return self.options.get("preset", ENCODE_DEFAULTS["preset"])

    @property
    def max_seconds(self) -> Optional[float]:
        return self.options.get("max_seconds")

    @property
    def max_frames(self) -> Optional[int]:
        return self.options.get("max_frames")


@dataclass(frozen=True)
class JobLineError:
    """A line that cannot become a job: reported as a failed job, never run."""

    line: int
    message: str
    output: Optional[str] = None  # the output name, when the line got that far


ParsedLine = Union[Job, JobLineError]


def parse_jobs(jobs_file: Path, out_dir: Path, settings_identity: str) -> list[ParsedLine]:
    """Every non-blank line of ``jobs_file`` as a :class:`Job` or a :class:`JobLineError`.

    ``settings_identity`` fingerprints the pipeline settings shared by all jobs (models,
    precision): it enters every job hash.
    """
    jobs_file = Path(jobs_file)
    try:
        text = jobs_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"batch: cannot read the jobs file {jobs_file} ({error}); pass a UTF-8 .jsonl file") from error
    base = jobs_file.resolve().parent
    out_dir = Path(out_dir).resolve()
    parsed: list[ParsedLine] = []
    outputs: dict[Path, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            job = _parse_line(raw, number, base, out_dir, settings_identity)
        except InputError as error:
            parsed.append(JobLineError(number, f"{jobs_file.name} line {number}: {error}"))
            continue
        if job.output in outputs:
            parsed.append(JobLineError(
                number, f"{jobs_file.name} line {number}, field output: {job.name} is already written by line "
                f"{outputs[job.output]}; give every job its own output name", output=job.name))
            continue
        outputs[job.output] = number
        parsed.append(job)
    return parsed


def _parse_line(raw: str, number: int, base: Path, out_dir: Path, settings_identity: str) -> Job:
    try:
        entry = json.loads(raw)
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON ({error.msg} at column {error.colno}); write one JSON object a line") from None
    if not isinstance(entry, dict):
        raise InputError(f"expected a JSON object with {', '.join(_LINE_KEYS[:3])}, got {type(entry).__name__}")
    unknown = sorted(set(entry) - set(_LINE_KEYS))
    if unknown:
        raise InputError(f"unknown field {unknown[0]!r}; a job has the fields {', '.join(_LINE_KEYS)}")
    source = _input_file(entry, "source", base)
    audio = _input_file(entry, "audio", base)
    output = _output_path(entry, out_dir)
    options = entry.get("options", {})
    if not isinstance(options, dict):
        raise InputError(f"field options: expected a JSON object, got {type(options).__name__}")
    check_options(options)
    digest = job_hash(file_sha256(source), file_sha256(audio), options, settings_identity)
    return Job(number, source, audio, output, options, digest)


def _input_file(entry: dict, key: str, base: Path) -> Path:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise InputError(f"field {key}: missing; give the path of the {key} file")
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base / path
    if not path.is_file():
        raise InputError(f"field {key}: {path} does not exist; check the path (relative paths start at the jobs file)")
    return path


def _output_path(entry: dict, out_dir: Path) -> Path:
    value = entry.get("output")
    if not isinstance(value, str) or not value:
        raise InputError("field output: missing; give the MP4 file name to write inside --out")
    name = Path(value)
    if name.is_absolute() or ".." in name.parts or name.name.startswith("."):
        raise InputError(f"field output: {value!r} must be a plain name inside --out (no absolute path, no '..')")
    if name.suffix.lower() != ".mp4":
        raise InputError(f"field output: {value!r} must end in .mp4")
    return out_dir / name


def check_options(options: dict[str, Any]) -> None:
    """Raise :class:`InputError` naming the first unknown or invalid option."""
    for key in options:
        if key not in OPTION_KEYS:
            raise InputError(f"field options.{key}: unknown option; valid ones are {', '.join(OPTION_KEYS)}")
    try:
        MotionOptions(**{k: v for k, v in options.items() if k in MOTION_KEYS})
        RegistrationOptions(**{k: v for k, v in options.items() if k in REGISTRATION_KEYS}).validate()
    except TypeError as error:  # e.g. a JSON list where a number belongs
        raise InputError(f"field options: {error}") from None
    except InputError as error:
        raise InputError(f"field options: {error}") from None
    try:
        check_encoder_options(options.get("crf", ENCODE_DEFAULTS["crf"]), options.get("preset", ENCODE_DEFAULTS["preset"]))
    except InputError as error:
        raise InputError(f"field options.crf/preset: {error}") from None
    seconds = options.get("max_seconds")
    if seconds is not None and not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0):
        raise InputError(f"field options.max_seconds: must be a positive number of seconds, got {seconds!r}")
    frames = options.get("max_frames")
    if frames is not None and not (isinstance(frames, int) and not isinstance(frames, bool) and frames >= 1):
        raise InputError(f"field options.max_frames: must be a positive whole number of frames, got {frames!r}")


def job_hash(source_sha256: str, audio_sha256: str, options: dict[str, Any], settings_identity: str) -> str:
    """SHA-256 over what decides a job's video: input bytes, options, pipeline settings."""
    header = {"format": JOB_FORMAT, "version": JOB_VERSION, "source": source_sha256, "audio": audio_sha256,
              "options": options, "settings": settings_identity}
    return hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()


def sidecar_path(output: Path) -> Path:
    return output.with_name(output.name + SIDECAR_SUFFIX)


def write_sidecar(job: Job, record: dict[str, Any]) -> None:
    """Record a finished job beside its MP4 (after the MP4 is in place: the sidecar commits it)."""
    body = {"format": JOB_FORMAT, "version": JOB_VERSION, "job_hash": job.job_hash, "line": job.line,
            "source": str(job.source), "audio": str(job.audio), "options": job.options,
            "mp4_bytes": job.output.stat().st_size, "mp4_sha256": file_sha256(job.output), **record}
    atomic_write_bytes(sidecar_path(job.output), json.dumps(body, indent=1, sort_keys=True).encode())


def finished(job: Job) -> Optional[dict[str, Any]]:
    """The sidecar of a finished job whose MP4 is still the one it recorded; None otherwise."""
    path = sidecar_path(job.output)
    try:
        record = json.loads(path.read_text())
        if not (isinstance(record, dict) and record.get("job_hash") == job.job_hash and job.output.is_file()):
            return None
        if job.output.stat().st_size != record.get("mp4_bytes") or file_sha256(job.output) != record.get("mp4_sha256"):
            return None
    except (OSError, ValueError):
        return None
    return record


def remove_partial_files(output: Path) -> list[Path]:
    """Delete the temporaries written for ``output`` and its record (never the output itself).

    For a job whose worker died: nothing else writes these names (one job per output), so
    they are removed whoever owned them, even a process on another host.
    """
    names = {output.name, sidecar_path(output).name}
    leftovers = [p for p in output.parent.glob(".*")
                 if (info := parse_temp_name(p.name)) is not None and info.target_name in names]
    for path in leftovers:
        discard(path)
    return leftovers
