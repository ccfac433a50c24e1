#!/bin/bash
# Prepared in session 28 (not yet run): issue 17's queued rounds joined into fuller render passes
# (render_frames 80) beside the default at 10 and 12 streams, 25 steps, every level run even past
# the first that misses real time (session 28's H100 missed at 8 with both, so the levels where
# joining acts never ran). Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
# The live runtime's warm-up now records whatever runs beside it (recordings_wait): its GPU tests first.
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_live_gpu.py > $OUT/live_gpu_tests.log 2>&1
echo "live gpu tests rc $? s $SECONDS"; tail -2 $OUT/live_gpu_tests.log
timeout $((585 - $(date +%s) + START)) python3 -m bench.bench_live --hubert $H --streams 10 12 --seconds 8 --parts concurrency --render-frames 0 80 \
  --every-level --out $OUT/live_joined.json > $OUT/live_joined.log 2>&1; echo "live rc $?"
grep -E "setup_s|'variant'|Error" $OUT/live_joined.log | cut -c1-500 | tail -12
