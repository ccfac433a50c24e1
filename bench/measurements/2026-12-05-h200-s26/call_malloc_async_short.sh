#!/bin/bash
# Session 26, call 3 (little device time left): call_malloc_async.sh's two parts in the other
# order, the real-ComfyUI benchmark of main's pack first (the end-to-end check of the fix), then
# the GPU test if time is left.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
python3 -c "import torchsde" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/torchsde-*.whl .whl/trampoline-*.whl || exit 1
mkdir -p /tmp/comfyui && tar xzf .carry/comfyui_src.tgz -C /tmp/comfyui
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((170 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 1 \
  --idle-before-warm 1 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1; echo "bench rc $? s $SECONDS"
grep -E "^(main|goal)" $OUT/comfyui.log | cut -c1-400
LEFT=$((195 - $(date +%s) + START)); [ $LEFT -gt 30 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_warp_decode.py -k malloc > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $?"; tail -3 $OUT/gpu_tests.log
