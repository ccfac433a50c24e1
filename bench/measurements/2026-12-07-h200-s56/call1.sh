#!/bin/bash
# Session 56, call 1: the live runtime's motion and render threads on one CUDA stream or two, taking
# turns on the device (motion_first) or not, side by side at 10 and 12 streams; their GPU parity
# test; then, in the time left, the engine's GPU tests after 1e64f17 (native allocator).
# Run from main: END=560 bash bench/measurements/2026-12-07-h200-s56/call1.sh
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
gpu_pytest 90 tests/test_live_gpu.py -k do_not_depend > $O/live_parity.log 2>&1
stamp "live parity gpu tests" $?; tail -1 $O/live_parity.log
wait $HUBERT_PID; stamp hubert $?
timeout $(( $(left) - 60 )) python3 -m bench.bench_live --hubert $H --parts concurrency --streams 10 12 --every-level \
  --one-stream 0 1 --motion-first 0 1 --seconds 8 --out $OUT/live_one_stream.json > $O/live.log 2>&1
stamp "bench_live one_stream 0 1, motion_first 0 1" $?
grep -E "^\{'variant'|warm_up_s" $O/live.log | cut -c1-330
cp $O/live.log $OUT/ 2>/dev/null
gpu_pytest $(( $(left) - 5 )) tests/test_warp_decode.py > $O/engine.log 2>&1
stamp "engine gpu tests, native allocator" $?; tail -1 $O/engine.log
grep -hE "PASSED|SKIPPED|FAILED|ERROR|^E  |identical streams" $O/live_parity.log $O/engine.log | cut -c1-240 > $OUT/gpu_tests.txt
grep -vE "PASSED" $OUT/gpu_tests.txt
