#!/bin/bash
# Prepared in session 31 for the next device session (refused twelve times as call 2). Run from
# main, carry [".whl", ".carry"]; before the call, here:
#   git diff main s31-saved-step > .carry/saved_steps.patch
#   git diff main s31-hand-back > .carry/hand_back.patch
# A real ComfyUI (headless, 127.0.0.1, its cudaMallocAsync), the all-in-one example, two packs with
# the stall tracer: "main", and "saved" (main + the patch: the deferred compile after the first
# prompt ever is saved as torch.compile's own compiled function in the user cache, and each later
# launch loads it as Load Ditto Models runs, so its first prompt switches from eager batches to
# compiled ones). Session 31's call 3 ran the branch as it was then on an H100: torch 2.11 had no
# aot_compile without Dynamo's enable_aot_compile, so it fell back to main's compile (announced);
# fixed since and checked on torch 2.11 on the CPU. Expect in "saved": new_process records
# aot_seconds (the load) and graph batches, its wall against main's 4.35-4.70 s; first_ever and
# the warm prompts as main. A third pack, "handback" (main + the second patch, branch
# s31-hand-back): the deferred compile gives the allocator's cached blocks back as it ends, so the
# prompt 10 s after another should no longer lose 0.22 s after its node (executed_to_next_s) to
# ComfyUI's cache trim (session 31, call 3). Two relaunches each.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
s=/tmp/saved; rm -rf $s && mkdir $s && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $s
patch -s -p1 -d $s < .carry/saved_steps.patch || exit 1
h=/tmp/handback; rm -rf $h && mkdir $h && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $h
patch -s -p1 -d $h < .carry/hand_back.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((585 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. --pack saved=$s --pack handback=$h --trace-stalls \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 60 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(main|saved|handback|log|goal)" $OUT/comfyui.log | cut -c1-1200
grep -o '"aot_[a-z]*": [^,]*' $OUT/comfyui.json | sort | uniq -c  # the saved step's load (or build) per prompt
