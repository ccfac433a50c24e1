"""Index arithmetic of Ditto's offline HuBERT pass: how speech is cut into streaming windows.

Ditto's HuBERT was exported for streaming: it encodes one fixed window of speech at a time and
the offline path slides that window over the whole clip. Everything is counted in video frames
of 40 ms (640 samples at 16 kHz). With the official layout ``past=3, valid=5, future=2``:

* one window holds ``3 + 5 + 2 = 10`` frames plus 80 samples: 6480 samples. HuBERT's
  convolutional front-end turns ``n`` samples into ``(n - 400) // 320 + 1`` rows at 50 Hz, so
  the 80 extra samples are what make 6400 samples of content yield 20 whole rows;
* the clip is padded with ``6480 - (5 + 2) * 640 = 2000`` zeros in front (the past context of
  the first window) and 6480 zeros behind (so the last window never runs off the end);
* window ``k`` starts at padded sample ``int(5k * 0.04 * 16000)`` and yields the frames
  ``5k .. 5k + 4``; its rows ``[-14, -4)`` (the five valid frames, skipping the two future
  frames at the end) are averaged in consecutive pairs, 50 Hz -> 25 Hz. In clip time, frame
  ``f`` is thus the mean of two rows that together read samples ``[640 f - 80, 640 f + 640)``;
* the result is cut to ``ceil(num_samples / 16000 * 25)`` frames.

Both the window starts and the frame count are evaluated in binary floating point exactly as
the reference writes them, quirks included: ``int(i * 0.04 * 16000)`` is one sample short of
``640 i`` for some ``i`` (the first window affected is ``i = 1615``, 64.6 s in) and
``ceil(4480 / 16000 * 25)`` is 8, not 7. The model was trained on features computed that way,
and the frame count fixes the length of the video, so we keep them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .audio_features import FPS, SAMPLE_RATE

FRAME_SECONDS = 1 / FPS  # 0.04, the same double as the literal the reference uses
HUBERT_ROWS_PER_FRAME = 2  # HuBERT runs at 50 Hz, video at 25 Hz
WINDOW_OVERHANG = 80  # receptive field (400) minus hop (320) of HuBERT's conv front-end


def _frames_to_samples(frames: int) -> int:
    # Floating-point on purpose: see the module docstring.
    return int(frames * FRAME_SECONDS * SAMPLE_RATE)


def num_video_frames(num_samples: int) -> int:
    """Number of 25 fps video frames Ditto makes for ``num_samples`` of 16 kHz speech.

    ``ceil(num_samples / 16000 * 25)`` in floating point, as the reference computes it (a few
    lengths, e.g. 4480 samples, get one frame more than exact arithmetic would give).
    """
    return math.ceil(num_samples / SAMPLE_RATE * FPS)


@dataclass(frozen=True)
class StreamingWindow:
    """Layout of one streaming HuBERT window, in video frames (40 ms, 640 samples each).

    ``past`` frames of left context, ``valid`` frames whose features are kept, ``future``
    frames of right context. The defaults are the ones Ditto's offline pipeline uses.
    """

    past: int = 3
    valid: int = 5
    future: int = 2

    def __post_init__(self) -> None:
        if self.past < 0 or self.valid < 1 or self.future < 0:
            raise ValueError(f"invalid streaming window {self}: need past, future >= 0 and valid >= 1")

    @property
    def num_samples(self) -> int:
        """Samples fed to HuBERT per call (6480 for the default layout)."""
        return _frames_to_samples(self.past + self.valid + self.future) + WINDOW_OVERHANG

    @property
    def pad_before(self) -> int:
        """Zeros in front of the clip: the past context of the first window (2000)."""
        return self.num_samples - _frames_to_samples(self.valid + self.future)

    @property
    def pad_after(self) -> int:
        """Zeros behind the clip: a whole window, so the last one is always complete (6480)."""
        return self.num_samples

    def kept_rows(self, num_rows: int) -> slice:
        """Rows of a window's ``num_rows`` HuBERT outputs that belong to its valid frames.

        Counted from the end, as the reference does: the last ``2 * future`` rows are future
        context, the ``2 * valid`` rows before them are kept.
        """
        stop = num_rows - HUBERT_ROWS_PER_FRAME * self.future
        return slice(stop - HUBERT_ROWS_PER_FRAME * self.valid, stop)

    def starts(self, num_frames: int) -> list[int]:
        """Start of each window in the padded clip, enough windows to cover ``num_frames``."""
        return [_frames_to_samples(i) for i in range(0, num_frames, self.valid)]
