#!/bin/bash
# Device call 3 (session 16): the live benchmark with 10 diffusion steps (call 1 ran 25): the
# one-stream chunk latency and the concurrency levels around 12 streams; then the live GPU tests,
# which now assert behaviour only (every frame, in order) and leave the goals to the benchmark.
set -u
START=$(date +%s)
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s16/preamble.sh
echo "preamble s $(( $(date +%s) - START ))"; SECONDS=0
timeout 380 python3 -m bench.bench_live --hubert $H --steps 10 --streams 1 8 10 12 14 16 --seconds 8 --minutes 0.5 --out $OUT/live_3.json > $OUT/live_3.log 2>&1; echo "live rc $?"
grep -vE "Warning|warn\(|^\s*$" $OUT/live_3.log | grep -v '^ ' | grep -v "^concurrency" | tail -14 | cut -c1-400
echo "live s $SECONDS"; SECONDS=0
LEFT=$((570 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -s tests/test_live_gpu.py > $OUT/live_gpu_tests_3.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error|first frame|streams:" $OUT/live_gpu_tests_3.log | head -12 | cut -c1-400
echo "tests s $SECONDS"
