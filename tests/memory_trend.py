"""Is a memory series levelling off or growing? A least-squares line through its later part.

Host RSS across renders swings by tens of MiB from one render to the next (allocator arenas,
encoder threads, the kernel's page accounting), so two points say nothing; the slope of a
straight-line fit, with its standard error, says how fast it grows and how sure that is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

MiB = 1 << 20


@dataclass(frozen=True)
class Trend:
    """Least-squares slope of ``values[first:]`` against the render index, in bytes a render."""

    first: int  # index of the first value fitted (the warm-up before it is left out)
    count: int  # values fitted
    slope: float
    stderr: float

    def bound(self, z: float = 2.0) -> tuple[float, float]:
        """``slope -/+ z * stderr``: about 95 % confidence for z = 2."""
        return self.slope - z * self.stderr, self.slope + z * self.stderr

    def verdict(self, limit: float) -> str:
        """``"bounded"`` if the slope is surely below ``limit`` bytes a render, ``"grows"`` if
        surely above, else ``"undecided"`` (too few or too noisy values to tell)."""
        low, high = self.bound()
        return "bounded" if high <= limit else "grows" if low > limit else "undecided"

    def describe(self, what: str = "host RSS") -> str:
        last = self.first + self.count - 1
        return (f"{what} slope over renders {self.first + 1}-{last + 1}: {self.slope / MiB:+.2f} "
                f"± {self.stderr / MiB:.2f} MiB a render")


def warm_up(count: int) -> int:
    """Renders left out of the fit: the first fifth (at least 3), while caches and arenas fill."""
    return max(3, count // 5)


def fit_trend(values: Sequence[float], first: int) -> Trend:
    """Straight line through ``values[first:]`` (at least three of them)."""
    ys = [float(v) for v in values[first:]]
    n = len(ys)
    if n < 3:
        raise ValueError(f"fit_trend needs at least 3 values after the first {first}, got {n}")
    xs = range(first, first + n)
    x_mean, y_mean = sum(xs) / n, sum(ys) / n
    sxx = sum((x - x_mean) ** 2 for x in xs)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys)) / sxx
    residual = sum((y - y_mean - slope * (x - x_mean)) ** 2 for x, y in zip(xs, ys))
    return Trend(first, n, slope, math.sqrt(residual / (n - 2) / sxx))
