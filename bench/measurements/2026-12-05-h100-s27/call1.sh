#!/bin/bash
# Session 27, call 1: session 26's fix for ComfyUI's cudaMallocAsync allocator measured at last.
# The GPU test (compiled engine and the LMDM sampler's recorded window in a process started with
# ComfyUI's allocator setting), then bench_comfyui in a real ComfyUI: main's pack (foreground:
# the first prompt of a process waits for the compile, plain Inductor kernels) beside branch
# s27-deferred-compile's (.carry/deferred.patch: under that allocator ComfyUI's engine renders a
# process's first prompt eagerly and compiles in the background once it is out). The first-ever
# server stays up 45 s after its prompt (as a user's does: the deferred compile gets done and
# cached), and the second prompt of a relaunch comes 10 s after the first (a user looking at the
# result; the third is queued at once). Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
python3 -c "import torchsde" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/torchsde-*.whl .whl/trampoline-*.whl || exit 1
mkdir -p /tmp/comfyui && tar xzf .carry/comfyui_src.tgz -C /tmp/comfyui
rm -rf /tmp/deferred && mkdir /tmp/deferred && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/deferred
patch -s -p1 -d /tmp/deferred < .carry/deferred.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_warp_decode.py -k malloc > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? s $SECONDS"; tail -3 $OUT/gpu_tests.log
LEFT=$((590 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 --models /tmp/models --hubert $H \
  --pack main=$PWD --pack deferred=/tmp/deferred --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --idle-before-warm 10 --linger-after-first 45 \
  --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1; echo "bench rc $?"
grep -E "^(main|deferred|goal)" $OUT/comfyui.log | cut -c1-400
