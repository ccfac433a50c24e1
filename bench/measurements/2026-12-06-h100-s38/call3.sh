#!/bin/bash
# Session 38, call 3: rounds_ahead (a motion round starts once the render thread has taken the one
# before it) against rounds back to back, each with rounds capped at 40 and at 80 frames, at 8,
# 10 and 12 JPEG streams (25 steps, HuBERT-large), side by side in one process; then, time left,
# the 12-stream profile again with its kernel table kept. Needs rounds_ahead.patch applied
# (git apply bench/measurements/2026-12-06-h100-s38/rounds_ahead.patch): the option did not land.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout $((560 - $(date +%s) + START)) python3 -m bench.bench_live --hubert $H --parts concurrency --streams 8 10 12 \
  --every-level --seconds 10 --rounds-ahead 0 1 --round-frames 0 80 --out $OUT/ahead.json > $OUT/ahead.log 2>&1
echo "ahead rc $? s $(( $(date +%s) - START ))"; grep -E "Error|setup_s" $OUT/ahead.log | cut -c1-300 | tail -3
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/ahead.json"))
for name, var in d["concurrency"]["variants"].items():
    for lvl in var["levels"]:
        r = lvl["rounds"]
        print(name, lvl["streams"], "p50", lvl["chunk_latency_p50_ms_median"], "p95", lvl["chunk_latency_p95_ms_max"],
              "missing", lvl["frames_missing"], "wall", lvl["wall_s"], "busy", lvl["load"]["busy"], "rt", lvl["realtime_ok"],
              "windows", r["windows"], "frames", r["frames"], "render_ms", r["render_ms"], "motion_ms", r["motion_ms"],
              "waited_ms", r.get("waited_ms"))
PY
left=$((585 - $(date +%s) + START))
if [ $left -gt 90 ]; then
  timeout $left python3 -m bench.bench_live --hubert $H --parts profile --profile /tmp/prof --profile-streams 12 \
    --out $OUT/profile12.json > $OUT/profile12.log 2>&1
  echo "profile rc $? s $(( $(date +%s) - START ))"
  head -45 /tmp/prof/live_profile_kernels_12.txt | cut -c1-200
fi
echo "end s $(( $(date +%s) - START ))"
