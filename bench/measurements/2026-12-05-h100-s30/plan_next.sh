#!/bin/bash
# Prepared in session 30 for the next device session (asked for as call 6, refused: no device time
# left). Run from main, carry [".whl", ".carry"]. .carry/freeze.patch is the freeze's change:
#   git diff e632d2c 9f12d04 -- ditto_core/gc_pauses.py ditto_core/host_memory.py nodes/runtime.py > .carry/freeze.patch
# ComfyUI with the stall tracer, "before" (main with that patch reversed: the nodes do not freeze
# the collector's objects) beside "freeze" (main: each Ditto node that finished freezes the live
# objects for 5 s, so ComfyUI's full collection after the prompt skips them). Calls 2, 3 and 5:
# the first prompt after a launch and the first 10 s after another lost 0.10-0.33 s at their end to
# that collection (the tracer's stacks); expect it gone (node_edges' executed_to_next_s and
# timer_to_executed_s about 0, no stall in the executor's gc.collect).
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
b=/tmp/before; rm -rf $b && mkdir $b && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $b
patch -s -R -p1 -d $b < .carry/freeze.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((590 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack before=$b --pack freeze=. --trace-stalls \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 3 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(before|freeze|log|goal)" $OUT/comfyui.log | cut -c1-1800
