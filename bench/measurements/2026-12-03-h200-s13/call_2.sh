#!/bin/bash
# Device call 2 (session 13): live streams after the round's HuBERT windows went into one
# CUDA-graph replay and the motion / render threads got streams of their own; the GPU tests of
# what changed (graph parity, two streams' frames beside four others, the two fixed failures).
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_live_hubert_windows.py tests/test_lmdm_sampler.py tests/test_batch_local.py "tests/test_hardening_models.py::test_failed_set_load_leaves_nothing_loaded" "tests/test_live_gpu.py::test_a_streams_frames_do_not_depend_on_the_streams_beside_it" -s > $OUT/gpu_tests.log 2>&1; echo "tests rc $?"; grep -E "^E |Error|passed|failed|identical streams" $OUT/gpu_tests.log | head -30 | cut -c1-300
echo "tests s $SECONDS"; SECONDS=0
timeout 390 python3 -m bench.bench_live --hubert $H --streams 1 4 8 12 16 --minutes 1 --out $OUT/live.json > $OUT/live.log 2>&1; echo "live rc $?"; grep -vE "Warning|warn" $OUT/live.log | cut -c1-400 | tail -14
echo "live s $SECONDS"
