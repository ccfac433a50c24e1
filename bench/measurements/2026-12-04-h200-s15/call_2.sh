#!/bin/bash
# Device call 2 (session 15): delivered frames/s after the put-back's host wait was removed, with
# the host pool's depth side by side (qQ: frames; the render batch is 64), then the GPU tests of
# the warp/decoder parity (their cases carried this time), the engine, the soak and the batch.
set -u
T0=$SECONDS
. bench/measurements/2026-12-04-h200-s15/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 170 python3 -m bench.bench_delivered --presets ultrafast superfast --layouts 1n0 1 1q64 1q128 1x16q128 --frames 400 --out $OUT/delivered_2.json > $OUT/delivered_2.log 2>&1; echo "delivered rc $?"; grep -E "GPU side|ultrafast:|superfast:|medium:|Error" $OUT/delivered_2.log | cut -c1-700
echo "delivered s $SECONDS"; SECONDS=0
timeout 390 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short --durations=0 --timeout 200 tests/test_warp_network.py \
  tests/test_decoder.py tests/test_warp_decode.py tests/test_hardening_soak.py tests/test_batch_local.py tests/test_video_writer.py \
  "tests/test_putback.py::test_triton_paste_back_queues_behind_the_render_without_waiting" > $OUT/gpu_tests_2.log 2>&1
echo "tests rc $?"; grep -E "^E |Error|passed|failed|^FAILED" $OUT/gpu_tests_2.log | head -30 | cut -c1-300
echo "tests s $SECONDS"
