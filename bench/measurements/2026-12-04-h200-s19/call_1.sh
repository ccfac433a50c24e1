#!/bin/bash
# Device call 1 (session 19): issue 17's concurrency with the HuBERT windows' stream at normal
# priority (0) and at the motion thread's (-1) side by side, 8 and 12 streams, 25 steps; then the
# live GPU tests (not run since sessions 17-18 changed the runtime) on the warm caches.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
LEFT=$((450 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_live --hubert $H --streams 8 12 --hubert-priority 0 -1 --seconds 8 --parts first_frame one_stream concurrency --out $OUT/live_1.json > $OUT/live_1.log 2>&1; echo "live rc $?"
grep -E "setup_s|first_frame|one_stream|streams|Error" $OUT/live_1.log | cut -c1-700 | tail -30
echo "live s $SECONDS"; SECONDS=0
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 40 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_live_gpu.py tests/test_live_stitch.py > $OUT/live_gpu_tests_1.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error" $OUT/live_gpu_tests_1.log | head -12 | cut -c1-400
echo "tests s $SECONDS"
