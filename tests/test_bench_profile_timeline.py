"""bench/profile_timeline.py: a py-spy speedscope file -> each thread's leaves and the main thread slice by slice."""
from __future__ import annotations

import json

from bench.profile_timeline import summarise


def _speedscope(path):
    frames = [{"name": "main", "file": "/x/bench/bench_time_to_video.py", "line": 1},
              {"name": "render", "file": "/x/ditto_core/pipeline.py", "line": 2},
              {"name": "conv", "file": "/venv/torch/nn/conv.py", "line": 3},
              {"name": "wait", "file": "/usr/lib/threading.py", "line": 4}]
    main = [[0, 1, 2]] * 30 + [[0, 3]] * 20  # 0.12 s rendering, then 0.08 s waiting
    worker = [[3]] * 5
    path.write_text(json.dumps({"shared": {"frames": frames}, "profiles": [
        {"name": 'Thread 1 ""', "samples": main, "weights": [0.004] * len(main)},
        {"name": 'Thread 2 "ditto-prime"', "samples": worker, "weights": [0.004] * len(worker)}]}))
    return path


def test_threads_leaves_and_the_main_threads_slices(tmp_path):
    text = summarise(_speedscope(tmp_path / "p.json"), None, slice_s=0.1, depth=2, top=3)
    lines = text.splitlines()
    assert lines[0] == '## Thread 1 "": 0.20 s sampled'
    assert "0.12 s  render | conv" in lines[1] and "0.08 s  main | wait" in lines[2]  # innermost frame of ours
    slices = [line for line in lines if " s  " in line and "-" in line.split("s")[0]]
    assert len(slices) == 2  # 0.1 s each: the first all rendering, the second mostly waiting
    assert "100%  main > render | conv" in slices[0] and "80%  main | wait" in slices[1]
    assert '## Thread 2 "ditto-prime": 0.02 s sampled' in lines
    assert sum('slice by slice' in line for line in lines) == 1  # only the main thread, by default
    picked = summarise(tmp_path / "p.json", "ditto-prime", slice_s=0.1, depth=2, top=3)
    assert '### Thread 2 "ditto-prime", slice by slice' in picked
