#!/bin/bash
# Session 32, after the ComfyUI call: the GPU tests of the files the hand-back touches, on main +
# the hand-back patch (saved steps dropped after call 2), then the live streams with the collector's record
# (session 30's plan_next_live.sh: whether collections sit in the live p95), one stream and 8 / 10
# streams, 25 steps, until the call's time is up. Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
for p in hand_back; do patch -s -p1 < bench/measurements/2026-12-06-h100-s32/$p.patch || exit 1; done
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 240 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_warp_decode.py tests/test_gc_pauses.py \
  tests/test_triton_kernels.py tests/test_cuda_graphs.py \
  > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; tail -8 $OUT/gpu_tests.log | cut -c1-300; SECONDS=0
timeout $((545 - $(date +%s) + START)) python3 -m bench.bench_live --hubert $H --streams 8 10 --seconds 12 \
  --parts one_stream concurrency --every-level --out $OUT/live_collector.json > $OUT/live_collector.log 2>&1
echo "live rc $? s $SECONDS"
grep -E "setup_s|'variant'|collector|Error" $OUT/live_collector.log | cut -c1-700 | tail -12
