#!/bin/bash
# Prepared in session 32 for the next device call: the freeze fix in a real ComfyUI on the GPU.
# Packs: "main" (the fix: an earlier gc.freeze() of someone else's no longer stops the nodes'
# freeze) and "before" (main with freeze_fix.patch reversed: the freeze steps aside, as the device's
# interpreter always made it). Expect the prompt 10 s after another to lose ~0 s after its node
# (executed_to_next_s) in "main" against 0.2-0.3 s in "before". Two relaunches each.
# Carry [".whl", ".carry"] (.carry: shared/, comfyui_src.tgz).
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
b=/tmp/before; rm -rf $b && mkdir $b && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $b
patch -s -R -p1 -d $b < bench/measurements/2026-12-06-h100-s32/freeze_fix.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
python3 -c "import gc; print('frozen at start-up:', gc.get_freeze_count())"
timeout $((588 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. --pack before=$b --trace-stalls \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 30 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(main|before|goal)" $OUT/comfyui.log | cut -c1-700
grep -c "were frozen (gc.freeze) before Ditto" $OUT/comfyui.json
