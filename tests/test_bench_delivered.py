"""bench_delivered's writer layouts (``E[xT][nN][qQ]``) reach VideoWriter as arguments it takes."""
from __future__ import annotations

import argparse

import av
import pytest
import torch

from bench.bench_delivered import Layout, parse_layout
from ditto_core.video.writer import VideoWriter


@pytest.mark.parametrize("text, layout", [
    ("1", Layout(1)), ("3", Layout(3)), ("1x16n10q128", Layout(1, 16, 10, 128)), ("2n0", Layout(2, None, 0)),
    ("1s", Layout(1, spin=True)), ("2x4q16s", Layout(2, 4, None, 16, True)), ("1w", Layout(1, wait_open=True)),
    ("1b0", Layout(1, writeback_mib=0)), ("1x14wb2", Layout(1, 14, wait_open=True, writeback_mib=2)),
    ("1tb0", Layout(1, trim_in_caller=True, writeback_mib=0)),
    ("1x2sw", Layout(1, 2, None, None, True, True)),
])
def test_layouts_parse_and_every_one_opens_a_writer(tmp_path, text, layout):
    assert parse_layout(text) == layout and layout.name == text
    path = tmp_path / "clip.mp4"
    frames = torch.randint(0, 256, (3, 64, 96, 3), dtype=torch.uint8)
    with VideoWriter(path, width=96, height=64, fps=25, preset="ultrafast", expected_frames=3,
                     **layout.writer_options()) as writer:
        writer.write(frames)
    with av.open(str(path)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 3


@pytest.mark.parametrize("text", ["0", "1x0", "1n20", "1q4", "x2", "1 n2", "1ss", "s1", "1ws", "1b", "1b2t", "1e"])
def test_a_bad_layout_is_refused_with_its_form(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"E\[xT\]\[nN\]\[qQ\]\[s\]\[w\]\[t\]\[bB\]"):
        parse_layout(text)
