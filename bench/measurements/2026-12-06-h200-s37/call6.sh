#!/bin/bash
# Session 37, call 6 (a fresh machine; it was an H100): live rounds split among the compiled batch sizes by the
# costs the warm-up measures (main) against each round padded to the next size up (main with
# .carry/batch_plan.patch reversed: a 25-frame round ran the 40-frame graph). bench_live
# concurrency at 8 and 12 streams, JPEG, 25 steps, HuBERT-large; main first (its warm-up compiles
# into the Inductor cache the before tree then reads: the engines' code is the same).
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/batch_plan.patch"].
set -u
START=$(date +%s); T0=$SECONDS
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/before && mkdir /tmp/before && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/before
patch -s -R -p1 -d /tmp/before < .carry/batch_plan.patch || exit 1
echo "preamble s $((SECONDS-T0))"
for v in main before; do
  tree=$PWD; [ $v = before ] && tree=/tmp/before
  left=$((560 - $(date +%s) + START)); [ $left -lt 50 ] && break
  SECONDS=0
  (cd $tree && timeout $left python3 -m bench.bench_live --hubert $H --streams 8 12 --every-level --seconds 10 \
     --parts concurrency --out $OUT/live_$v.json > $OUT/live_$v.log 2>&1)
  echo "$v rc $? s $SECONDS"; grep -E "setup_s|Error" $OUT/live_$v.log | cut -c1-300 | tail -3
done
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
for v in ("main", "before"):
    try:
        d = json.load(open(f"{out}/live_{v}.json"))
    except Exception as e:
        print(v, "no json", e); continue
    for name, var in d["concurrency"]["variants"].items():
        for lvl in var["levels"]:
            r = lvl["rounds"]
            print(v, lvl["streams"], "p50", lvl["chunk_latency_p50_ms_median"], "p95", lvl["chunk_latency_p95_ms_max"],
                  "missing", lvl["frames_missing"], "gaps", lvl["streams_with_gaps"], "wall", lvl["wall_s"], "busy", lvl["load"]["busy"],
                  "per_stream", lvl["load"]["per_stream"], "rt", lvl["realtime_ok"], "frames", r["frames"], "render_ms", r["render_ms"], "motion_ms", r["motion_ms"])
PY
echo "end s $(( $(date +%s) - START ))"
