#!/bin/bash
# Prepared in session 27 for the next device session (not yet run): main's pack (ComfyUI's
# deferred compile under cudaMallocAsync) in a real ComfyUI, three relaunches, so that the second
# prompt's spread (2.56 / 1.66 s in session 27, both with every full batch on the compiled step)
# shows with the engine's compiled_at beside each request ("compiled N s before the request")
# and the all-in-one node's stages (register, audio features, motion, render, finalize).
# Then the live avatar's one-stream latency under ComfyUI's allocator (bench_live in a process
# started with its setting), which no run has measured. Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
python3 -c "import torchsde" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/torchsde-*.whl .whl/trampoline-*.whl || exit 1
[ -d /tmp/comfyui/comfy ] || { mkdir -p /tmp/comfyui && tar xzf .carry/comfyui_src.tgz -C /tmp/comfyui; }
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 330 python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 3 --idle-before-warm 10 --linger-after-first 45 \
  --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1; echo "bench rc $? s $SECONDS"
grep -E "^(main|goal)" $OUT/comfyui.log | cut -c1-400
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 120 ] || exit 0
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $LEFT python3 -m bench.bench_live --hubert $H --streams 1 \
  --parts first_frame one_stream --out $OUT/live_malloc_async.json > $OUT/live_malloc_async.log 2>&1; echo "live rc $?"
grep -E "first_frame|one_stream|p95" $OUT/live_malloc_async.log | cut -c1-400 | tail -6
