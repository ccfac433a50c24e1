#!/bin/bash
# Session 28, call 3: call 2's failed GPU test again (its background thread drew random numbers,
# which a recording on another thread forbids; now it fills), then session 24's plan for issue 17:
# queued rounds joined into fuller render passes (render_frames 80) beside the default at 8, 10
# and 12 streams, 25 steps. Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_graphs.py > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? s $SECONDS"; tail -2 $OUT/gpu_tests.log
LEFT=$((590 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_live --hubert $H --streams 8 10 12 --seconds 8 --parts concurrency --render-frames 0 80 --out $OUT/live_joined.json > $OUT/live_joined.log 2>&1; echo "live rc $?"
grep -E "setup_s|'variant'|Error" $OUT/live_joined.log | cut -c1-500 | tail -12
