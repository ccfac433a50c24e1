#!/bin/bash
# Device call 1 (session 16): the live benchmark with the engine graphs recorded at warm-up and
# the stitching eager (the fix for session 15's fault while four streams opened), the concurrency
# levels, and a profiled 3-s stream; then the live GPU tests.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s16/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 400 python3 -m bench.bench_live --hubert $H --streams 1 4 8 12 16 --seconds 8 --minutes 0.5 --profile $OUT/prof --out $OUT/live_1.json > $OUT/live_1.log 2>&1; echo "live rc $?"
gzip -f $OUT/prof/live_profile_trace.json 2>/dev/null
grep -vE "Warning|warn\(|^\s*$" $OUT/live_1.log | grep -v '^ ' | tail -14 | cut -c1-700
echo "live s $SECONDS"; SECONDS=0
LEFT=$((560 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -x tests/test_live_gpu.py > $OUT/live_gpu_tests_1.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error" $OUT/live_gpu_tests_1.log | head -12 | cut -c1-400
echo "tests s $SECONDS"
