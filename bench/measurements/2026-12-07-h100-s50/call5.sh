#!/bin/bash
# Session 50, call 5 (about 400 s, fresh machine): the GPU tests of what this session's sampler
# change touches beyond the sampler's own (call 3): the live runtime (its compiled bf16 samplers
# record whole windows through the refactored loop) and the CUDA graphs (CapturedCall.warm_up).
# Run from main: END=400 bash bench/measurements/2026-12-07-h100-s50/call5.sh (carry as call 1)
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-400}
O=/tmp/o5; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call5.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp "preamble" 0
timeout 60 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE --tb=short \
  tests/test_cuda_graphs.py > $O/cuda_graphs_tests.log 2>&1
stamp "cuda graphs tests" $?; tail -2 $O/cuda_graphs_tests.log; pack
timeout $(( $(left) - 10 )) python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short \
  --durations=0 tests/test_live_gpu.py > $O/live_gpu_tests.log 2>&1
stamp "live gpu tests" $?; grep -E "PASSED|FAILED|ERROR|s call|s setup" $O/live_gpu_tests.log | cut -c1-160
pack
