#!/bin/bash
# Session 58, prepared and not run (no device time left): a real ComfyUI's first prompt after a launch with the first batch's priming (the
# default since session 57, which Load Ditto Models' start_warmup() takes) against the full priming
# (a copy of the tree with start_warmup's default set back to "full"), two relaunches each in turn.
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s58/plan_next_comfyui.sh
# Carry [".whl", ".carry/comfyui_src.tgz", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#  ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
. bench/measurements/device_call.sh
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh > /dev/null
rm -rf /tmp/primefull && mkdir /tmp/primefull && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/primefull
sed -i 's/def start_warmup(self, prime: str = "first")/def start_warmup(self, prime: str = "full")/' /tmp/primefull/ditto_core/pipeline.py
grep -c 'prime: str = "full"' /tmp/primefull/ditto_core/pipeline.py || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
stamp preamble 0
timeout $(( $(left) - 10 )) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. --pack primefull=/tmp/primefull \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 90 --out $OUT/comfyui_priming.json > $O/comfyui.log 2>&1
stamp "comfyui main against primefull" $?
grep -E "^(main|primefull|goal)" $O/comfyui.log | cut -c1-420
cp $O/comfyui.log $OUT/ 2>/dev/null
