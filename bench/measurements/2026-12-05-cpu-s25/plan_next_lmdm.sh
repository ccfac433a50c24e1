#!/bin/bash
# Prepared in session 25 for the next device session (not yet run): issue 17's LMDM window.
# 1. bench_lmdm at 25 steps, batch 1, before and after session 25's change (every layer's
#    cross-attention memory concatenated in one copy a step instead of one per layer: 400 -> 50
#    copies a window; the compiled sampler's 75 per-step copies of the time conditions -> 3; bit-identical), in turn, twice; the after tree also tries each attention
#    backend for the compiled bf16 sampler (--sdpa) and Inductor's max_autotune (--autotune).
# 2. bench_live's one-stream chunk latency and first frame with the change (25 steps).
# Before them, the LMDM GPU tests.
# Before the call, here:  git diff b3d913f 2cb5e28 -- ditto_core/models/lmdm.py ditto_core/motion/lmdm_sampler.py > .carry/lmdm_cat.patch
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
rm -rf /tmp/old && mkdir /tmp/old && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/old
patch -s -R -p1 -d /tmp/old < .carry/lmdm_cat.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
# The change on a GPU first: the sampler's GPU tests (graphs, compiled steps against eager).
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_lmdm_sampler.py tests/test_lmdm.py > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $?"; tail -2 $OUT/gpu_tests.log
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_lmdm
EXTRA="--sdpa flash efficient cudnn --autotune"  # the first round only: the second compares the two trees alone
for round in 1 2; do
  timeout 240 python3 -m bench.bench_lmdm --steps 25 --compile bf16 $EXTRA --out $OUT/lmdm_after_$round.json > /dev/null 2>>$OUT/lmdm.err; echo "after $round rc $?"
  (cd /tmp/old && timeout 120 python3 -m bench.bench_lmdm --steps 25 --compile bf16 --out $OUT/lmdm_before_$round.json > /dev/null 2>>$OUT/lmdm.err); echo "before $round rc $?"
  EXTRA=""
done
python3 - <<'PY'
import json, os
for name in sorted(os.listdir(os.environ["OUT"])):
    if name.startswith("lmdm_") and name.endswith(".json"):
        row = json.load(open(os.path.join(os.environ["OUT"], name)))["per_window"]["25"]
        print(name, {k: round(v["median_ms"], 3) for k, v in row.items() if isinstance(v, dict) and "median_ms" in v and "sequence" not in k})
PY
echo "lmdm s $SECONDS"
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 150 ] || exit 0
timeout $LEFT python3 -m bench.bench_live --hubert $H --streams 1 --parts first_frame one_stream av_sync --out $OUT/live_one.json > $OUT/live_one.log 2>&1; echo "live rc $?"
grep -E "first_frame|one_stream|p95" $OUT/live_one.log | cut -c1-400 | tail -8
