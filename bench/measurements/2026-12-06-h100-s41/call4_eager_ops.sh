#!/bin/bash
# Session 41, call 4 (the session's last 300 s of device time): session 35's eager_ops.py on main,
# the eager warp+decode batch's aten ops by CUDA time a frame (fp16, batch 32, our Triton kernels
# on). Since ONE_CLIP_COMPILE_MIN_FRAMES is 6,500 the CLI renders clips up to 260 s this way; the
# table names the next pass worth taking. No checkpoints needed (random networks).
set -u
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
timeout 170 python3 bench/measurements/2026-12-06-h100-s35/eager_ops.py > $OUT/eager_ops.log 2>&1
echo "rc $?"
grep -v -i warn $OUT/eager_ops.log | cut -c1-330 | head -45
