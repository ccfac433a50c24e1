#!/bin/bash
# Prepared in session 29 (not yet run): the host heap trim put off until no video has been made
# for 2 s (f2a7cba, .carry/idle_trim.patch) against the trim started as each video ends, in a real
# ComfyUI, three relaunches each: the 0.19-0.29 s some prompts spent after the node's timer
# (node_edges: timer_to_executed_s, executed_to_next_s) should be gone from "main".
# Carry [".whl", ".carry"] (.carry/idle_trim.patch: git show f2a7cba -- ditto_core > .carry/idle_trim.patch).
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
d=/tmp/before; rm -rf $d && mkdir $d && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $d
patch -s -R -p1 -d $d < .carry/idle_trim.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((590 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack before=$d --pack main=. --image $E/portrait.jpg --audio $E/speech_24k_mono.wav \
  --repeats 3 --warm-rounds 1 --idle-before-warm 10 --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(before|main|log|goal)" $OUT/comfyui.log
