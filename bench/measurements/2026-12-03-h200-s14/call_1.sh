#!/bin/bash
# Device call 1 (session 14): the GPU tests of every CUDA-graph owner after each got a capture
# stream of its own (session 13's change, never run on a GPU), with the HuBERT-large build that
# call 2's live benchmark needs.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -s tests/test_cuda_graphs.py tests/test_live_hubert_windows.py tests/test_lmdm_sampler.py "tests/test_live_gpu.py::test_a_streams_frames_do_not_depend_on_the_streams_beside_it" > $OUT/gpu_tests.log 2>&1; echo "tests rc $?"; grep -E "^E |Error|passed|failed|identical streams|worst" $OUT/gpu_tests.log | head -30 | cut -c1-300
echo "tests s $SECONDS"
