#!/bin/bash
# Session 34, call 4: the decoder's eager kernels (ditto_core/models/spade_norm_triton.py).
# 1. GPU tests: the kernels, the Triton kernels' file, the decoder, warp+decode.
# 2. eager_layouts.py with the new "decoder_kernels" variant beside call 3's.
# 3. first_prompt_probe.py (session 33's) main against "before" (main with decoder_kernels.patch
#    reversed: the decoder's PyTorch ops in eager batches), alternating; round 1 is cold.
# 4. A real ComfyUI, bench_comfyui with main alone, with what time is left (before: call 2).
# Carry [".whl", ".carry"].
set -u
START=$(date +%s)
S=bench/measurements/2026-12-06-h100-s34
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh > /dev/null
b=/tmp/before; rm -rf $b && mkdir $b && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $b
patch -s -R -p1 -d $b < $S/decoder_kernels.patch || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
echo "preamble s $(( $(date +%s) - START ))"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_spade_norm_triton.py tests/test_triton_kernels.py \
  tests/test_decoder.py tests/test_warp_decode.py 2>&1 | tail -4
timeout 100 python3 $S/eager_layouts.py 2>&1 | grep -E "^(current|cl_varmean|decoder_kernels)" | cut -c1-400
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
mkdir -p $OUT/probe
P=bench/measurements/2026-12-06-h100-s33/first_prompt_probe.py
for round in 1 2; do
  for v in main before; do
    left=$((250 - $(date +%s) + START)); [ $left -lt 25 ] && break 2
    tree=.; [ $v = before ] && tree=$b
    (cd $tree && PYTHONPATH=$tree:/tmp/site PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $left python3 $P main /tmp/models \
      $OLDPWD/$E/portrait.jpg $OLDPWD/$E/speech_24k_mono.wav $OUT/probe/${v}_$round.json 1 > $OUT/probe/${v}_$round.txt 2>>$OUT/probe/stderr.log)
    echo "$v $round $(head -1 $OUT/probe/${v}_$round.txt | cut -c1-600)"
  done
done
rm -f $OUT/probe/*.mp4; rm -rf $OUT/probe/avatars
left=$((400 - $(date +%s) + START))
timeout $left python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 1 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 90 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $?"
grep -E "^(main|before|goal)" $OUT/comfyui.log | cut -c1-600
