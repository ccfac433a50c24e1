"""A Ditto config pickle as the official one is shaped (default_kwargs with a blink table), for the
stand-in HuggingFace hubs of the downloader tests. Tests may pickle; the package never unpickles."""
from __future__ import annotations

import pickle

import numpy as np


def official_shaped_config(rows: int = 15) -> bytes:
    """Protocol-4 pickle of ``{"default_kwargs": {"delta_eye_arr": (rows, 63) float32, ...}}``."""
    closing = np.sin(np.linspace(0, np.pi, rows, dtype=np.float32))[:, None]  # open -> closed -> open
    table = np.zeros((rows, 63), np.float32) + closing * np.linspace(-0.01, 0.01, 63, dtype=np.float32)
    return pickle.dumps({"default_kwargs": {"delta_eye_arr": table, "delta_eye_open_n": 0}}, protocol=4)
