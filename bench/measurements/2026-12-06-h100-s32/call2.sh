#!/bin/bash
# Session 32 (the first call that ran; the probe of call1.sh was folded into this one): a real
# ComfyUI (headless, 127.0.0.1, its cudaMallocAsync), the all-in-one example, three packs with the
# stall tracer: "main"; "saved" (main + saved_steps.patch here = branch s32-saved-step: the
# deferred compile is kept as torch.compile's saved function in the user cache and each later
# launch loads it as the models load); "handback" (main + hand_back.patch here = branch
# s32-hand-back: the deferred compile hands the allocator's cached blocks back as it ends). Two
# relaunches each. Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
for pack in saved:saved_steps handback:hand_back; do
  d=/tmp/${pack%%:*}; rm -rf $d && mkdir $d && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $d
  patch -s -p1 -d $d < bench/measurements/2026-12-06-h100-s32/${pack##*:}.patch || exit 1
done
echo "preamble s $((SECONDS-T0))"; SECONDS=0
nvidia-smi --query-gpu=name --format=csv,noheader; python3 -c "import torch; print(torch.__version__)"
timeout $((588 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. --pack saved=/tmp/saved --pack handback=/tmp/handback --trace-stalls \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 60 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(main|saved|handback|goal)" $OUT/comfyui.log | cut -c1-900
grep -o '"aot_[a-z]*": [^,]*' $OUT/comfyui.json | sort | uniq -c
grep -ah "saved compiled step\|compiled step for volume" $OUT/comfyui.json | head -5 | cut -c1-600
