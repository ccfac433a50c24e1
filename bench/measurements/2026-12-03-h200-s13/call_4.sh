#!/bin/bash
# Device call 4 (session 13): after each graph owner got a capture stream of its own (call 2's
# HuBERT "overflow" under back-to-back rounds: the HuBERT and LMDM graphs had been recorded on
# one stream, so they shared a cuBLAS workspace while replaying at once on two), the GPU tests
# of every CUDA-graph owner. The HuBERT-large build is skipped (not needed).
set -u
T0=$SECONDS
sed '/make_hubert_large/d' bench/measurements/2026-12-02-h200-s9/preamble.sh > /tmp/preamble_light.sh
. /tmp/preamble_light.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_cuda_graphs.py tests/test_live_hubert_windows.py tests/test_lmdm_sampler.py > $OUT/gpu_tests.log 2>&1; echo "tests rc $?"; grep -E "^E |Error|passed|failed" $OUT/gpu_tests.log | head -20 | cut -c1-300
echo "tests s $SECONDS"
