#!/bin/bash
# Session 32, call 4 (the device time left): freeze_probe.py with ComfyUI's allocator and without.
# No wheels needed; random checkpoints only. Carry [".carry"].
set -u
python3 .carry/shared/reference/make_checkpoints.py --out /tmp/models --seed 0 > /dev/null
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 120 python3 bench/measurements/2026-12-06-h100-s32/freeze_probe.py /tmp/models 2>&1 | tail -3
timeout 60 python3 bench/measurements/2026-12-06-h100-s32/freeze_probe.py /tmp/models 2>&1 | tail -3
