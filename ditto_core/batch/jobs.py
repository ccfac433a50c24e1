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
import math
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
MAX_NAME_BYTES = 200
"""Longest part of an output name, in UTF-8 bytes: the file system allows 255, and the job's
record (``.json``) and its segment folder (``.segments-<name>-<hash>``) lengthen it."""


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
        # utf-8-sig: editors on Windows start the file with a byte-order mark.
        text = jobs_file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"batch: cannot read the jobs file {jobs_file} ({error}); pass a UTF-8 .jsonl file") from error
    base = jobs_file.resolve().parent
    out_dir = Path(out_dir).resolve()
    parsed: list[ParsedLine] = []
    outputs: dict[Path, int] = {}  # output -> its line
    folders: dict[Path, int] = {}  # folder an output lies in -> the first line that needs it
    # Only "\n" ends a line (str.splitlines would also split at form feeds and at U+2028 inside
    # a JSON string, numbering the lines unlike an editor does).
    for number, raw in enumerate(text.split("\n"), start=1):
        raw = raw.removesuffix("\r")
        if not raw.strip():
            continue
        where = f"{jobs_file.name} line {number}"
        try:
            job = _parse_line(raw, number, base, out_dir, settings_identity)
        except InputError as error:
            parsed.append(JobLineError(number, f"{where}: {error}"))
            continue
        try:
            _check_output_is_free(job, out_dir, outputs, folders)
        except InputError as error:
            parsed.append(JobLineError(number, f"{where}, {error}", output=job.name))
            continue
        outputs[job.output] = number
        for folder in job.output.relative_to(out_dir).parents:
            folders.setdefault(out_dir / folder, number)
        parsed.append(job)
    if not parsed:
        raise InputError(f"batch: the jobs file {jobs_file} holds no jobs; write one JSON object a line")
    return parsed


def _check_output_is_free(job: Job, out_dir: Path, outputs: dict[Path, int], folders: dict[Path, int]) -> None:
    """Refuse a job whose output another line writes, or that is a folder of another's output."""
    taken = f"field output: {job.name}"
    if job.output in outputs:
        raise InputError(f"{taken} is already written by line {outputs[job.output]}; "
                         "give every job its own output name")
    if job.output in folders:
        raise InputError(f"{taken} is a folder of line {folders[job.output]}'s output; "
                         "give every job its own output name")
    for folder in job.output.relative_to(out_dir).parents:
        if out_dir / folder in outputs:
            raise InputError(f"{taken} lies inside line {outputs[out_dir / folder]}'s output {folder}; "
                             "give every job its own output name")


def _parse_line(raw: str, number: int, base: Path, out_dir: Path, settings_identity: str) -> Job:
    try:
        entry = json.loads(raw, object_pairs_hook=_refuse_repeated_keys)
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON ({error.msg} at column {error.colno}); write one JSON object a line") from None
    except RecursionError:
        raise InputError("not valid JSON (nested too deeply); write one JSON object a line") from None
    except ValueError as error:  # an integer of thousands of digits, or a key given twice
        raise InputError(f"not valid JSON ({error}); write one JSON object a line") from None
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
    digest = job_hash(_digest(source, "source"), _digest(audio, "audio"), options, settings_identity)
    return Job(number, source, audio, output, options, digest)


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    for key, value in pairs:
        if key in entry:
            raise ValueError(f"the key {key!r} is given twice")
        entry[key] = value
    return entry


def _input_file(entry: dict, key: str, base: Path) -> Path:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise InputError(f"field {key}: missing; give the path of the {key} file (a string)")
    try:
        path = Path(value).expanduser()  # "~user/..." of an unknown user raises RuntimeError
        path = path if path.is_absolute() else base / path
        found = path.is_file()  # a name too long for the file system raises OSError
    except (OSError, RuntimeError, ValueError) as error:
        raise InputError(f"field {key}: cannot use {value!r} ({error}); check the path") from None
    if not found:
        raise InputError(f"field {key}: {path} does not exist; check the path (relative paths start at the jobs file)")
    return path


def _digest(path: Path, key: str) -> str:
    try:
        return file_sha256(path)
    except OSError as error:
        raise InputError(f"field {key}: cannot read {path} ({error}); check the file and its permissions") from None


def _output_path(entry: dict, out_dir: Path) -> Path:
    value = entry.get("output")
    if not isinstance(value, str) or not value:
        raise InputError("field output: missing; give the MP4 file name to write inside --out")
    name = Path(value)
    if name.is_absolute() or ".." in name.parts or name.name.startswith("."):
        raise InputError(f"field output: {value!r} must be a plain name inside --out (no absolute path, no '..')")
    if name.suffix.lower() != ".mp4":
        raise InputError(f"field output: {value!r} must end in .mp4")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InputError(f"field output: {value!r} holds a control character; use a printable file name")
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in name.parts):
        raise InputError(f"field output: a part of {value[:40]!r}... is longer than {MAX_NAME_BYTES} bytes; "
                         "use a shorter name")
    path = out_dir / name
    for folder in name.parents:
        place = out_dir / folder
        if place.exists() and not place.is_dir():
            raise InputError(f"field output: {place} is a file, not a folder; rename the output or move the file")
    if path.is_dir():
        raise InputError(f"field output: {path} is a folder; give the name of an MP4 file")
    return path


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
    if seconds is not None and not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                                    and math.isfinite(seconds) and seconds > 0):
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
