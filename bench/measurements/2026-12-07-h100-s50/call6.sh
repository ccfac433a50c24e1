#!/bin/bash
# Session 50, call 6 (about 150 s, fresh machine): the step graphs under ComfyUI's real allocator
# (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), where the GPU tests of call 3 only faked its flag:
# the sampler's GPU tests that record step graphs with the allocator's own detection, and the
# bit-for-bit test's cudaMallocAsync cases.
# Run from main: END=150 bash bench/measurements/2026-12-07-h100-s50/call6.sh (carry as call 1)
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-150}
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
stamp "wheels" $?
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $(( END - $(date +%s) + START - 5 )) python3 -m pytest -m gpu -v \
  -n 0 -p no:cacheprovider -p no:randomly --no-header -rfE --tb=short tests/test_lmdm_sampler.py \
  -k "step_graphs_replay and True or (cuda_graph_replay_equals_eager and step) or (grad_mode and step)" \
  > $OUT/call6_async_tests.log 2>&1
stamp "async tests" $?; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/call6_async_tests.log | cut -c1-170
