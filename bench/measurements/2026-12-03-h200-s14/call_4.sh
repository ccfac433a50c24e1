#!/bin/bash
# Device call 4 (session 14): after CapturedCall's warm-up moved off the capture stream (call 3:
# the LMDM graphs faulted; the workspace cuBLAS made in the warm-up was in the ordinary pool), the
# probe as it is and the GPU tests of every graph owner.
set -u
. .carry/preamble.sh
SECONDS=0
PYTHONPATH=$PWD:$PYTHONPATH timeout 200 python3 .carry/live_crash_probe.py as-is > $OUT/probe_as-is.log 2>&1; echo "as-is rc $? s $SECONDS"
grep -E "^as-is |Error: |illegal" $OUT/probe_as-is.log | head -6 | cut -c1-250
SECONDS=0
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_cuda_graphs.py tests/test_live_hubert_windows.py tests/test_lmdm_sampler.py > $OUT/gpu_tests.log 2>&1; echo "tests rc $?"; grep -E "^E |Error|passed|failed" $OUT/gpu_tests.log | head -20 | cut -c1-300
echo "tests s $SECONDS"
