#!/bin/bash
# Prepared in session 35 for the next device call (not yet run). What session 35 could not measure:
# the bias change (conv_bias.patch, call 4: eager batch 3.94 -> 3.48 ms a frame) in what users see.
# 1. A real ComfyUI, main against "before" (main with conv_bias.patch reversed), two relaunches each
#    (bench_comfyui now keeps each pack on its own library whatever PYTHONPATH holds).
# 2. bench_time_to_video's CLI, main against before (the CLI renders clips under 2,500 frames eagerly
#    in every process, warm ones too), 3 new processes each.
# The whole .carry no longer fits the 64 MiB with .whl; carry
#   [".whl", ".carry/comfyui_src.tgz", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#    ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
# (tests that read the reference cases need .carry/shared/reference/cases, 18 MB: carry it instead of
# the ComfyUI source in a call that runs them).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
S=bench/measurements/2026-12-06-h100-s35
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh > /dev/null
rm -rf /tmp/before && mkdir /tmp/before && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/before
patch -s -R -p1 -d /tmp/before < $S/conv_bias.patch || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
echo "preamble s $(( $(date +%s) - START ))"
left=$((330 - $(date +%s) + START))
timeout $left python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. --pack before=/tmp/before \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 90 --out $OUT/comfyui.json > /tmp/comfyui.log 2>&1
echo "comfyui rc $? s $(( $(date +%s) - START ))"
grep -E "^(main|before|goal)" /tmp/comfyui.log | cut -c1-420
for v in main before; do
  left=$((585 - $(date +%s) + START)); [ $left -lt 60 ] && break
  tree=$PWD; [ $v = before ] && tree=/tmp/before
  (cd $tree && PYTHONPATH=$tree:/tmp/site timeout $left python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
    --image $OLDPWD/$E/portrait.jpg --audio $OLDPWD/$E/speech_24k_mono.wav --clips example --warmups cli --repeats 3 \
    --out $OUT/ttv_$v.json > /tmp/ttv_$v.log 2>&1)
  echo "$v ttv rc $?"; grep -iE "new.process|warm_process" /tmp/ttv_$v.log | cut -c1-300 | head -4
done
echo "end s $(( $(date +%s) - START ))"
