#!/bin/bash
# Session 35, call 4 (the session's last 321 s of device time): the decoder's conv biases moved
# into the eager kernel path (conv_bias.patch). Carry [".whl", ".carry"].
# 1. GPU tests of the decoder's kernels (fp16 and bf16 parity with PyTorch's ops).
# 2. eager_bias.py: the eager batch before/after in one process, alternating, 3 rounds.
# 3. ahead_malloc_async.py: the motion ahead under cudaMallocAsync, warnings counted.
set -u
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/av-*.whl .whl/soxr-*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
S=bench/measurements/2026-12-06-h100-s35
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_spade_norm_triton.py 2>&1 | grep -E "passed|failed|Error" | tail -4
echo "tests s $(( $(date +%s) - START ))"
timeout 70 python3 $S/eager_bias.py 2>&1 | grep -v -i warn | tail -9
echo "bias s $(( $(date +%s) - START ))"
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 60 python3 $S/ahead_malloc_async.py .carry/shared/data/ditto_example \
  > /tmp/ahead.txt 2> /tmp/ahead_err.txt
echo "ahead rc $? warnings $(grep -c 'uncaptured free' /tmp/ahead_err.txt)"; cut -c1-400 /tmp/ahead.txt; grep -iE "error|Traceback" /tmp/ahead_err.txt | head -5
echo "end s $(( $(date +%s) - START ))"
