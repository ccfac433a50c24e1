#!/bin/bash
# Session 28, call 2: the recording put off beside background GPU work under cudaMallocAsync
# (80a24b6) on the GPU (its test), then main beside main without that change in a real ComfyUI:
# two relaunches each, two warm rounds per relaunch (is a slow second prompt the first after the
# idle wait, or the first after the compile?), each prompt's CPU and stages, the warnings counted.
# Carry [".whl", ".carry"] (.carry/capture_quiet.patch: the change, reversed for "before").
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
rm -rf /tmp/before && mkdir /tmp/before && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/before
patch -s -R -p1 -d /tmp/before < .carry/capture_quiet.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_graphs.py > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? s $SECONDS"; tail -3 $OUT/gpu_tests.log
LEFT=$((585 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 --models /tmp/models --hubert $H \
  --pack before=/tmp/before --pack after=. --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 2 \
  --idle-before-warm 10 --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1; echo "bench rc $? s $SECONDS"
grep -E "^(before|after|log|goal)" $OUT/comfyui.log | cut -c1-330
