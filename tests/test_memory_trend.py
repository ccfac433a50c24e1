"""The soak test's trend check on synthetic series: flat, levelling off, leaking, too short."""
from __future__ import annotations

import random

import pytest

from tests.memory_trend import MiB, fit_trend, warm_up

LIMIT = 1 * MiB


def _series(count: int, slope_mib: float, noise_mib: float, seed: int = 0, plateau_after: int = 0) -> list[float]:
    rng = random.Random(seed)
    values = []
    for i in range(count):
        growth = slope_mib * (min(i, plateau_after) if plateau_after else i)
        values.append((2600 + growth + rng.gauss(0, noise_mib)) * MiB)
    return values


def test_exact_line_is_recovered():
    trend = fit_trend([100 + 3 * i for i in range(10)], first=2)
    assert trend.slope == pytest.approx(3) and trend.stderr == pytest.approx(0, abs=1e-9)
    assert (trend.first, trend.count) == (2, 8)


def test_hundred_noisy_flat_renders_are_bounded():
    values = _series(100, 0.0, 30)
    trend = fit_trend(values, warm_up(len(values)))
    assert trend.verdict(LIMIT) == "bounded", trend.describe()


def test_growth_that_levels_off_after_warm_up_is_bounded():
    values = _series(100, 10.0, 20, plateau_after=15)  # +150 MiB over the first 15 renders, then flat
    assert fit_trend(values[:20], 0).verdict(LIMIT) == "grows"  # the warm-up alone looks like a leak
    assert fit_trend(values, warm_up(len(values))).verdict(LIMIT) == "bounded"


def test_a_steady_leak_grows():
    values = _series(100, 3.0, 30)  # the 20-render soak's worst fit, kept up for 100 renders
    trend = fit_trend(values, warm_up(len(values)))
    assert trend.verdict(LIMIT) == "grows" and abs(trend.slope - 3 * MiB) < 3 * trend.stderr, trend.describe()


def test_twenty_noisy_renders_cannot_tell_a_small_leak():
    values = _series(20, 1.0, 40)
    assert fit_trend(values, warm_up(len(values))).verdict(LIMIT) == "undecided"
    with pytest.raises(ValueError, match="at least 3"):
        fit_trend(values[:4], 2)
