#!/bin/bash
# Device call 3 (session 17): live streams in step after the render's one host transfer a round
# and the workers' short GIL turns, capped rounds against uncapped side by side with each round's
# timings; then one stream of speech for up to 30 minutes pushed as fast as it is animated, host
# and CUDA memory sampled every 10 s of stream (fewer minutes when the machine started cold and
# its compile caches are empty); then the live GPU tests if time is left.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s17/preamble.sh
PRE=$((SECONDS-T0)); echo "preamble s $PRE"; SECONDS=0
MIN=30; [ $PRE -lt 30 ] || MIN=8
timeout 520 python3 -m bench.bench_live --hubert $H --parts first_frame one_stream concurrency long_stream --streams 8 10 12 --round-frames 0 1000 --seconds 8 --minutes $MIN --out $OUT/live_3.json > $OUT/live_3.log 2>&1; echo "live rc $? (long stream $MIN min)"
grep -E "^\{'round_frames|setup_s|first_frame|one_stream|long_stream|Error" $OUT/live_3.log | cut -c1-1000
echo "live s $SECONDS"; SECONDS=0
LEFT=$((585 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -x tests/test_live_gpu.py tests/test_live_stitch.py > $OUT/live_gpu_tests_3.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error" $OUT/live_gpu_tests_3.log | head -12 | cut -c1-400
echo "tests s $SECONDS"
