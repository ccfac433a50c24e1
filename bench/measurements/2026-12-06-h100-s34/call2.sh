#!/bin/bash
# Session 34, call 2: the goals' own device where one is lent (asked as nvidia-h200).
# 1. A real ComfyUI on 127.0.0.1 (its cudaMallocAsync), bench_comfyui with main only: the first
#    prompt ever (lingering until the compile is logged, 90 s at most), then two relaunches, each
#    with a prompt 10 s after the first and one queued at once (the ComfyUI table).
# 2. eager_profile.py: where an eager batch (a new process's first clip) spends its GPU time,
#    against the compiled batch.
# Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
S=bench/measurements/2026-12-06-h100-s34
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh > /dev/null
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((440 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 90 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(main|goal)" $OUT/comfyui.log | cut -c1-700
grep -ho '"compile_seconds": [0-9.]*' $OUT/comfyui.json | sort | uniq -c
export PYTHONPATH=$PWD:$PYTHONPATH
left=$((585 - $(date +%s) + START))
[ $left -gt 40 ] && timeout $left python3 $S/eager_profile.py > $OUT/eager_profile.txt 2>&1; echo "profile rc $?"
cat $OUT/eager_profile.txt | cut -c1-300 | head -80
