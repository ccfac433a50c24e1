#!/bin/bash
# Prepared in session 29 (not yet run), call 2 of 3: a real ComfyUI, two relaunches each, one warm
# round, three packs: "before" = main with the trim as each video ends (f2a7cba reversed:
# git show f2a7cba -- ditto_core > .carry/idle_trim.patch), "main" (the trim once no video has been
# made for 2 s), "pieces" = main + .carry/primed_shapes.patch (see plan_next.sh). Expect the
# 0.19-0.29 s some prompts spent after the node's timer (node_edges: timer_to_executed_s,
# executed_to_next_s; every first prompt after the compile in session 29) gone from main and
# pieces, and the new process's render shorter in pieces (its last eager batch a primed size).
# Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
for v in before:-R:idle_trim pieces::primed_shapes; do
  IFS=: read -r name how patchname <<< "$v"
  d=/tmp/$name; rm -rf $d && mkdir $d && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $d
  patch -s $how -p1 -d $d < .carry/$patchname.patch || exit 1
done
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((590 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack before=/tmp/before --pack main=. --pack pieces=/tmp/pieces \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(before|main|pieces|log|goal)" $OUT/comfyui.log
