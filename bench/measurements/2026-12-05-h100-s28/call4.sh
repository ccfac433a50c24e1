#!/bin/bash
# Session 28, call 4: the GPU tests of CUDA graphs beside background work and graph teardown under
# cudaMallocAsync (call 3 found the dropped sampler's warnings), the sampler's and the engine's
# graph tests. Carry [".whl", ".carry"].
set -u
T0=$SECONDS
. bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_graphs.py tests/test_lmdm_sampler.py \
  tests/test_warp_decode.py -k "cuda_graphs or sampler or lmdm or malloc or priming or capture" > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; grep -E "passed|failed|FAILED|^E " $OUT/gpu_tests.log | head -20 | cut -c1-300
