#!/bin/bash
# Session 29, call 2: where a prompt's unexplained time goes in a real ComfyUI, and two remedies side
# by side. Every pack times the interpreter's garbage collections during the node (python_gc*) and
# ComfyUI's model management (model_management). Packs: main; gc = main with automatic collection
# put off while a Ditto node runs (.carry/gc_put_off.patch); noprime = main without the eager
# priming at model load (.carry/no_prime.patch: does it slow the motion stage more than it saves
# the render?). Two relaunches each, one warm round. Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
for v in gc:gc_put_off noprime:no_prime; do
  d=/tmp/${v%%:*}; rm -rf $d && mkdir $d && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $d
  patch -s -p1 -d $d < .carry/${v#*:}.patch || exit 1
done
echo "preamble s $((SECONDS-T0))"; SECONDS=0
LEFT=$((590 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 --models /tmp/models --hubert $H \
  --pack main=. --pack gc=/tmp/gc --pack noprime=/tmp/noprime --image $E/portrait.jpg --audio $E/speech_24k_mono.wav \
  --repeats 2 --warm-rounds 1 --idle-before-warm 10 --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(main|gc|noprime|log|goal)" $OUT/comfyui.log | cut -c1-420
