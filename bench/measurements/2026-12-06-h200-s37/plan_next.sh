#!/bin/bash
# Prepared in session 37 for the next device call (not yet run). On an H200, where 8 streams were
# real time before session 37's live batching change (a round split among the compiled batch
# sizes by the warm-up's measured costs; measured on an H100 in call 6):
# 1. bench_live JPEG at 8, 10 and 12 streams (--every-level), 25 steps, HuBERT-large;
# 2. the change's GPU test (test_live_gpu.py, the warm-up's measured costs), not run yet;
# 3. bench_live H.264 at the same levels;
# 4. contention_probe.py: what an LMDM window costs beside the render (its docstring).
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s); T0=$SECONDS
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $((SECONDS-T0))"
live() {
  left=$((580 - $(date +%s) + START)); [ $left -lt 60 ] && return
  SECONDS=0
  timeout $left python3 -m bench.bench_live --hubert $H --output $1 --streams 8 10 12 --every-level --seconds 10 \
    --parts concurrency --out $OUT/live_$1.json > $OUT/live_$1.log 2>&1
  echo "$1 rc $? s $SECONDS"; grep -E "setup_s|Error" $OUT/live_$1.log | cut -c1-300 | tail -2
}
live jpeg
SECONDS=0
timeout 150 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE -s tests/test_live_gpu.py \
  -k "batch_size or every_frame" > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; grep -E "batch costs|passed|failed|Error" $OUT/gpu_tests.log | cut -c1-300 | tail -4
live h264
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
for v in ("jpeg", "h264"):
    try:
        d = json.load(open(f"{out}/live_{v}.json"))
    except Exception as e:
        print(v, "no json", e); continue
    print(v, "render_batch_ms", d.get("render_batch_ms"))
    for var in d["concurrency"]["variants"].values():
        for lvl in var["levels"]:
            r = lvl["rounds"]
            print(v, lvl["streams"], "p50", lvl["chunk_latency_p50_ms_median"], "p95", lvl["chunk_latency_p95_ms_max"],
                  "missing", lvl["frames_missing"], "wall", lvl["wall_s"], "busy", lvl["load"]["busy"], "rt", lvl["realtime_ok"],
                  "frames", r["frames"], "render_ms", r["render_ms"], "motion_ms", r["motion_ms"])
PY
left=$((590 - $(date +%s) + START))
[ $left -gt 60 ] && PYTHONPATH=$PWD:$PYTHONPATH timeout $left python3 bench/measurements/2026-12-06-h200-s37/contention_probe.py 2>$OUT/probe.err | tail -1
echo "end s $(( $(date +%s) - START ))"
