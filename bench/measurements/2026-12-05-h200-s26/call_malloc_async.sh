#!/bin/bash
# Session 26, calls 2 and 3: call 1 found that in a real ComfyUI on a GPU every compiled render
# failed: ComfyUI runs PyTorch's cudaMallocAsync allocator, which torch's CUDA-graph trees
# (mode="reduce-overhead") do not support. Call 2 tried the step recorded into graphs of ours
# there (it failed too); since: plain Inductor kernels under that allocator. For the next session
# (call 3 was refused): the GPU test, then main's pack through the real-ComfyUI benchmark (two relaunches).
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
python3 -c "import torchsde" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/torchsde-*.whl .whl/trampoline-*.whl || exit 1
mkdir -p /tmp/comfyui && tar xzf .carry/comfyui_src.tgz -C /tmp/comfyui
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_warp_decode.py -k malloc > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? s $SECONDS"; tail -3 $OUT/gpu_tests.log
LEFT=$((590 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1; echo "bench rc $?"
grep -E "^(main|goal)" $OUT/comfyui.log | cut -c1-400
