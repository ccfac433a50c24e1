#!/bin/bash
# Session 27, call 2: the pack in a real ComfyUI on the GPU with ComfyUI's own defaults (its
# cudaMallocAsync allocator): tests/test_comfyui_live.py with COMFYUI_GPU=1 -- every API example
# workflow queued and its MP4 checked, Unload Models, and Publish Live Avatar streaming over
# ComfyUI's own server (never run on a GPU before). Carry [".whl", ".carry"].
set -u
T0=$SECONDS
. bench/measurements/2026-12-04-h200-s19/preamble.sh
python3 -c "import torchsde" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/torchsde-*.whl .whl/trampoline-*.whl || exit 1
[ -d /tmp/comfyui/comfy ] || { mkdir -p /tmp/comfyui && tar xzf .carry/comfyui_src.tgz -C /tmp/comfyui; }
echo "preamble s $((SECONDS-T0))"; SECONDS=0
COMFYUI_DIR=/tmp/comfyui COMFYUI_PYTHON=python3 COMFYUI_GPU=1 DITTO_LIVE_TIMEOUT_S=300 timeout 520 \
  python3 -m pytest -q -p no:cacheprovider -rA tests/test_comfyui_live.py > $OUT/comfyui_gpu_tests.log 2>&1
echo "tests rc $? s $SECONDS"; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/comfyui_gpu_tests.log | tail -12
for f in /tmp/pytest-of-*/pytest-*/comfy_base*/comfyui.log; do cp "$f" $OUT/comfyui_server.log; done
grep -iE "ditto|error|warn" $OUT/comfyui_server.log | cut -c1-300 | tail -25
