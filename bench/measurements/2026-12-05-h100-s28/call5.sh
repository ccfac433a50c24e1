#!/bin/bash
# Session 28, call 5 (call 4 was refused a machine): the GPU tests of recordings beside background work and graph teardown
# under cudaMallocAsync), then second_clip_probe.py (the first clip after the deferred compile).
set -u
START=$(date +%s); T0=$SECONDS
. bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_graphs.py tests/test_lmdm_sampler.py \
  tests/test_warp_decode.py -k "cuda_graphs or sampler or lmdm or malloc_async_allocator or capture" > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; grep -E "passed|failed|FAILED|^E " $OUT/gpu_tests.log | head -12 | cut -c1-300
LEFT=$((300 - $(date +%s) + START)); [ $LEFT -gt 40 ] || exit 0
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync TORCHINDUCTOR_CACHE_DIR=/tmp/ind_probe timeout $LEFT \
  env PYTHONPATH=$PWD:$PYTHONPATH python3 bench/measurements/2026-12-05-h100-s28/second_clip_probe.py /tmp/models $OUT/second_clip.json 2>&1 | tail -6 | cut -c1-400
