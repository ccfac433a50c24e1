#!/bin/bash
# Prepared in session 34 for the next device call (not yet run).
# 1. What call 4 could not fit: first_prompt_probe.py main against "before" (main with
#    decoder_kernels.patch reversed: the decoder's PyTorch ops in eager batches) on one machine,
#    alternating; round 1 is cold. Expect the render about 0.4 s shorter with the kernels.
# 2. eager_profile.py with the decoder's kernels on: the eager batch's kernels now (3.94 ms a frame
#    in call 4), for the next step (the label embedding's phase copies, the warp network's ops).
# 3. The CLI, which renders clips under 2,500 frames eagerly in every process (warm too):
#    bench_time_to_video's CLI states, main against before.
# 0. First, the GPU tests of what landed after call 4 (eager Triton launches under their tensors'
#    device, the writer's colour conversion too); the two-GPU test needs a two-GPU kind.
# Carry [".whl", ".carry"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)  # absolute: the runs below change directory
S=bench/measurements/2026-12-06-h100-s34
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
b=/tmp/before; rm -rf $b && mkdir $b && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $b
patch -s -R -p1 -d $b < $S/decoder_kernels.patch || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
echo "preamble s $(( $(date +%s) - START ))"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_kernels.py tests/test_video_colour.py \
  tests/test_spade_norm_triton.py 2>&1 | tail -2
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
mkdir -p $OUT/probe
P=bench/measurements/2026-12-06-h100-s33/first_prompt_probe.py
for round in 1 2 3; do
  for v in main before; do
    left=$((330 - $(date +%s) + START)); [ $left -lt 25 ] && break 2
    tree=.; [ $v = before ] && tree=$b
    (cd $tree && PYTHONPATH=$tree:/tmp/site PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $left python3 $P main /tmp/models \
      $OLDPWD/$E/portrait.jpg $OLDPWD/$E/speech_24k_mono.wav $OUT/probe/${v}_$round.json 1 > $OUT/probe/${v}_$round.txt 2>>$OUT/probe/stderr.log)
    echo "$v $round $(head -1 $OUT/probe/${v}_$round.txt | cut -c1-600)"
  done
done
rm -f $OUT/probe/*.mp4; rm -rf $OUT/probe/avatars
PROBE_DECODER_KERNELS=1 PROBE_COMPILED=0 timeout 60 python3 $S/eager_profile.py > $OUT/eager_profile.txt 2>&1
grep -v Warning $OUT/eager_profile.txt | cut -c1-200 | head -40
for v in main before; do
  left=$((560 - $(date +%s) + START)); [ $left -lt 60 ] && break
  tree=.; [ $v = before ] && tree=$b
  (cd $tree && PYTHONPATH=$tree:/tmp/site timeout $left python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
    --image $OLDPWD/$E/portrait.jpg --audio $OLDPWD/$E/speech_24k_mono.wav --clips example --warmups cli --repeats 2 \
    --out $OUT/ttv_$v.json > $OUT/ttv_$v.log 2>&1)
  echo "$v ttv rc $?"; grep -iE "new.process|warm|goal" $OUT/ttv_$v.log | cut -c1-300 | head -8
done
