#!/bin/bash
# Session 27, calls 2-4 (the device time left after call 1), `bash call2.sh <seconds>`: the GPU
# test under ComfyUI's allocator again (call 1's failed on cuDNN's TF32 rounding of random
# inputs, 3.8e-4; now plain fp32), then Publish Live Avatar streaming from a real ComfyUI on the
# GPU with its own defaults (tests/test_comfyui_live.py with COMFYUI_GPU=1, that test only).
# Call 2 ran it as first written (ComfyUI exited: the device has no front-end package); calls 3
# and 4 ran the test part alone, with the empty front-end root below (call 3 with the test's
# models still on the CPU, call 4 on ComfyUI's device). Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
. bench/measurements/2026-12-04-h200-s19/preamble.sh
python3 -c "import torchsde" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/torchsde-*.whl .whl/trampoline-*.whl || exit 1
[ -d /tmp/comfyui/comfy ] || { mkdir -p /tmp/comfyui && tar xzf .carry/comfyui_src.tgz -C /tmp/comfyui; }
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_warp_decode.py -k malloc > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? s $SECONDS"; tail -3 $OUT/gpu_tests.log
LEFT=$(($1 - $(date +%s) + START)); SECONDS=0
mkdir -p /tmp/no_front_end
COMFYUI_DIR=/tmp/comfyui COMFYUI_PYTHON=python3 COMFYUI_GPU=1 COMFYUI_FRONT_END_ROOT=/tmp/no_front_end DITTO_LIVE_TIMEOUT_S=120 timeout $LEFT \
  python3 -m pytest -q -p no:cacheprovider -rA tests/test_comfyui_live.py -k published_avatar > $OUT/comfyui_gpu_live.log 2>&1
echo "live test rc $? s $SECONDS"; grep -E "^(PASSED|FAILED|ERROR)|passed|failed|Error" $OUT/comfyui_gpu_live.log | tail -8 | cut -c1-300
for f in /tmp/pytest-of-*/pytest-*/comfy_base*/comfyui.log; do [ -f "$f" ] && cp "$f" $OUT/comfyui_server.log; done
grep -iE "ditto|error|warn" $OUT/comfyui_server.log 2>/dev/null | cut -c1-300 | tail -20
