#!/bin/bash
# Session 30, call 5 (the host of calls 3-4, still warm): main beside branch s29-primed-shapes
# (.carry/primed_shapes.patch) in ComfyUI with the stall tracer, two relaunches, one warm round.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
d=/tmp/pieces; rm -rf $d && mkdir $d && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $d
patch -s -p1 -d $d < .carry/primed_shapes.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((440 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. --pack pieces=$d --trace-stalls \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(main|pieces|log|goal)" $OUT/comfyui.log | cut -c1-1500
