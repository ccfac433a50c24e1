#!/bin/bash
# Prepared in session 37 for the next device call (not yet run): the live batching change
# (a round split among the compiled batch sizes by the warm-up's measured costs; measured on an
# H100 in call 6) on an H200, where 8 streams were real time before it: how many are now, JPEG
# and H.264 each at 8, 10 and 12 streams (--every-level), 25 steps, HuBERT-large.
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s); T0=$SECONDS
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $((SECONDS-T0))"
for output in jpeg h264; do
  left=$((580 - $(date +%s) + START)); [ $left -lt 60 ] && break
  SECONDS=0
  timeout $left python3 -m bench.bench_live --hubert $H --output $output --streams 8 10 12 --every-level --seconds 10 \
    --parts concurrency --out $OUT/live_$output.json > $OUT/live_$output.log 2>&1
  echo "$output rc $? s $SECONDS"; grep -E "setup_s|Error" $OUT/live_$output.log | cut -c1-300 | tail -2
done
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
for v in ("jpeg", "h264"):
    try:
        d = json.load(open(f"{out}/live_{v}.json"))
    except Exception as e:
        print(v, "no json", e); continue
    for var in d["concurrency"]["variants"].values():
        for lvl in var["levels"]:
            r = lvl["rounds"]
            print(v, lvl["streams"], "p50", lvl["chunk_latency_p50_ms_median"], "p95", lvl["chunk_latency_p95_ms_max"],
                  "missing", lvl["frames_missing"], "wall", lvl["wall_s"], "busy", lvl["load"]["busy"], "rt", lvl["realtime_ok"],
                  "frames", r["frames"], "render_ms", r["render_ms"], "motion_ms", r["motion_ms"])
PY
echo "end s $(( $(date +%s) - START ))"
