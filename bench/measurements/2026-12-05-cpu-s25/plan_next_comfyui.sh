#!/bin/bash
# Prepared in session 25 for the next device session (not yet run): time to video in a real
# ComfyUI (bench_comfyui: the all-in-one example queued over HTTP, request to MP4), main's pack
# beside the precompiled-step branch's, two relaunches each. ComfyUI runs its core only: no front
# end (headless), no database, no optional node packages (what the device lacks of its
# requirements: torchsde and trampoline travel as wheels). Before the call, here:
#   tar --exclude=.git --exclude=.venv --exclude=__pycache__ --exclude=./models --exclude=./output \
#       --exclude=./input --exclude=./user --exclude=./temp -czf .carry/comfyui_src.tgz -C /work/ComfyUI .
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl torchsde==0.2.6 trampoline==0.1.2
#   git diff main s24-precompiled-step -- ditto_core nodes tests docs > .carry/pre.patch
# and carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
# The preamble installs the wheels on a fresh machine only: a warm one from an earlier call lacks these two.
python3 -c "import torchsde" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/torchsde-*.whl .whl/trampoline-*.whl || exit 1
mkdir -p /tmp/comfyui && tar xzf .carry/comfyui_src.tgz -C /tmp/comfyui
rm -rf /tmp/pre && mkdir /tmp/pre && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/pre
patch -s -p1 -d /tmp/pre < .carry/pre.patch || exit 1
echo "preamble s $((SECONDS-T0))"
LEFT=$((590 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --pack main=$PWD --pack precompiled=/tmp/pre --models /tmp/models --hubert $H --image $E/portrait.jpg \
  --audio $E/speech_24k_mono.wav --repeats 2 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1; echo "bench rc $?"
grep -E "^(main|precompiled|goal)" $OUT/comfyui.log | cut -c1-400
