#!/bin/bash
# Device call 1 (session 15): delivered frames/s with x264's threads niced below the render thread
# (layouts side by side: nN = nice N; without it the writer's default, 10), then the GPU tests
# that need no long warm-up and whose reference cases fit this call's carry.
set -u
T0=$SECONDS
. bench/measurements/2026-12-04-h200-s15/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 200 python3 -m bench.bench_delivered --presets ultrafast superfast medium --layouts 1n0 1 1x16n10 1x16n19 --frames 400 --out $OUT/delivered_1.json > $OUT/delivered_1.log 2>&1; echo "delivered rc $?"; grep -E "GPU side|ultrafast:|superfast:|medium:|Error" $OUT/delivered_1.log | cut -c1-600
echo "delivered s $SECONDS"; SECONDS=0
timeout 290 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short --durations=0 --timeout 150 tests \
  --ignore tests/test_live_gpu.py --ignore tests/test_aot_packages.py --ignore tests/test_hardening_soak.py \
  --ignore tests/test_batch_local.py --ignore tests/test_warp_network.py --ignore tests/test_decoder.py > $OUT/gpu_tests_1.log 2>&1
echo "tests rc $?"; grep -E "^E |Error|passed|failed|^FAILED" $OUT/gpu_tests_1.log | head -30 | cut -c1-300
echo "tests s $SECONDS"
