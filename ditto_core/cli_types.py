"""Value types for the command lines' flags (argparse ``type=``), shared by every subcommand.

Each refuses a bad value with the reason; argparse puts the flag's name in front of it.
"""
from __future__ import annotations

import argparse
import math
from typing import Callable, Optional


def int_in(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    """A whole number in [low, high] (no upper bound when ``high`` is None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            allowed = f"{low} or more" if high is None else f"{low} to {high}"
            raise argparse.ArgumentTypeError(f"{value} is out of range: {allowed}")
        return value

    return parse


def positive_seconds(text: str) -> float:
    """A finite number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


def seconds_or_zero(text: str) -> float:
    """A finite number of seconds, 0 or more (0: no limit)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0: no limit), got {text!r}")
    return value
