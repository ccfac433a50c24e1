"""Where a process's wall time went, thread by thread, from a py-spy speedscope file.

``bench_time_to_video --profile --py-spy PATH`` samples a new-process child with py-spy
(``--threads --idle``: every thread, waits included, 250 samples a second). This prints, for
one thread, what it was doing in each slice of its life (the innermost frames of our code and
the leaf that held it), and for every thread the leaves it spent most time in::

    python -m bench.profile_timeline bench/results/example_cli_profiled.speedscope.json --slice 0.1

A thread's samples are consecutive ticks of the sampler from its first one, so the slices of the
main thread are seconds since the process started; other threads count from their own start.
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path
from typing import Optional

OURS = ("ditto_core/", "bench/")


def _label(stack: list[dict], depth: int) -> str:
    """The innermost ``depth`` frames of our code, then the leaf: "a > b > c | leaf"."""
    ours = [f"{f['name']}" for f in stack if any(part in (f.get("file") or "") for part in OURS)]
    leaf = stack[-1]["name"] if stack else "(idle)"
    return " > ".join(ours[-depth:]) + f" | {leaf}"


def summarise(path: Path, thread: Optional[str], slice_s: float, depth: int, top: int) -> str:
    data = json.loads(path.read_text())
    frames = data["shared"]["frames"]
    lines = []
    for number, profile in enumerate(data["profiles"]):
        weights = profile["weights"]
        stacks = [[frames[i] for i in sample] for sample in profile["samples"]]
        leaves = collections.Counter()
        for stack, weight in zip(stacks, weights):
            leaves[_label(stack, 1)] += weight
        total = sum(weights)
        lines.append(f"## {profile['name']}: {total:.2f} s sampled")
        lines += [f"  {seconds:7.2f} s  {label}" for label, seconds in leaves.most_common(top)]
        if (thread is None and number > 0) or (thread is not None and thread not in profile["name"]):
            continue
        lines.append(f"### {profile['name']}, slice by slice ({slice_s:g} s)")
        clock, bucket = 0.0, collections.Counter()
        for index, (stack, weight) in enumerate(zip(stacks, weights)):
            bucket[_label(stack, depth)] += weight
            clock += weight
            held = sum(bucket.values())
            if held >= slice_s - 1e-9 or index == len(stacks) - 1:
                label, seconds = bucket.most_common(1)[0]
                lines.append(f"  {clock - held:6.2f}-{clock:6.2f} s  {seconds / held:4.0%}  {label}")
                bucket.clear()
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("speedscope", type=Path)
    parser.add_argument("--thread", default=None,
                        help="the thread shown slice by slice (part of its name; default: the first, the main thread)")
    parser.add_argument("--slice", type=float, default=0.1, help="seconds per slice")
    parser.add_argument("--depth", type=int, default=3, help="frames of our code shown per slice")
    parser.add_argument("--top", type=int, default=12, help="leaves listed per thread")
    args = parser.parse_args()
    print(summarise(args.speedscope, args.thread, args.slice, args.depth, args.top))


if __name__ == "__main__":
    main()
