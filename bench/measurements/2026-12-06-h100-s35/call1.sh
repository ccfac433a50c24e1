#!/bin/bash
# Session 35, call 1. Carry [".whl", ".carry"].
# 0. GPU tests: the recording without a warm-up (test_lmdm_sampler, test_cuda_graphs), and
#    session 34's eager launches under their tensors' device (triton kernels, colour, decoder norms).
# 1. first_prompt_probe.py (session 33; one process as a ComfyUI first prompt runs, seconds from the
#    models loaded to the MP4), alternating, 3 rounds (round 1 cold): main; ahead (main with the
#    motion ahead of the render, ahead_probe.py); nocapskip (main with capture_skip.patch reversed);
#    nodeckernels (main with session 34's decoder_kernels.patch reversed).
# 2. eager_profile.py (session 34) with the decoder's kernels on.
# 3. bench_time_to_video's CLI states, main against nodeckernels (the CLI renders short clips eagerly).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)  # absolute: the runs below change directory
S=bench/measurements/2026-12-06-h100-s35
S34=bench/measurements/2026-12-06-h100-s34
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
for v in nocapskip nodeckernels; do
  rm -rf /tmp/$v && mkdir /tmp/$v && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/$v
done
patch -s -R -p1 -d /tmp/nocapskip < $S/capture_skip.patch || exit 1
patch -s -R -p1 -d /tmp/nodeckernels < $S34/decoder_kernels.patch || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
echo "preamble s $(( $(date +%s) - START ))"
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_graphs.py tests/test_video_colour.py \
  tests/test_spade_norm_triton.py tests/test_triton_kernels.py \
  "tests/test_lmdm_sampler.py::test_a_recording_put_off_skips_its_warm_up_on_the_thread_that_ran_the_window_eagerly" \
  tests/test_lmdm_sampler.py::test_cuda_graph_replay_equals_eager 2>&1 | grep -E "passed|failed|Error|error" | tail -6
echo "tests done s $(( $(date +%s) - START ))"
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
mkdir -p $OUT/probe
P=$PWD/bench/measurements/2026-12-06-h100-s33/first_prompt_probe.py
for round in 1 2 3; do
  for v in main ahead nocapskip nodeckernels; do
    left=$((400 - $(date +%s) + START)); [ $left -lt 20 ] && break 2
    tree=$PWD; script=$P; name=main
    case $v in ahead) script=$PWD/$S/ahead_probe.py; name=ahead;; nocapskip|nodeckernels) tree=/tmp/$v;; esac
    (cd $tree && PYTHONPATH=$tree:/tmp/site PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $left python3 $script $name \
      /tmp/models $OLDPWD/$E/portrait.jpg $OLDPWD/$E/speech_24k_mono.wav /tmp/probe_${v}_$round.json 1 > /tmp/probe_${v}_$round.txt 2>>$OUT/probe/stderr.log)
    cp /tmp/probe_${v}_$round.json $OUT/probe/ 2>/dev/null
    echo "$v $round $(head -1 /tmp/probe_${v}_$round.txt | cut -c1-420)"
  done
done
echo "probes done s $(( $(date +%s) - START ))"
PROBE_DECODER_KERNELS=1 PROBE_COMPILED=0 timeout 60 python3 $S34/eager_profile.py > $OUT/eager_profile.txt 2>&1
grep -v Warning $OUT/eager_profile.txt | cut -c1-200 | head -30
for v in main nodeckernels; do
  left=$((575 - $(date +%s) + START)); [ $left -lt 60 ] && break
  tree=$PWD; [ $v = nodeckernels ] && tree=/tmp/$v
  (cd $tree && PYTHONPATH=$tree:/tmp/site timeout $left python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
    --image $OLDPWD/$E/portrait.jpg --audio $OLDPWD/$E/speech_24k_mono.wav --clips example --warmups cli --repeats 2 \
    --out $OUT/ttv_$v.json > $OUT/ttv_$v.log 2>&1)
  echo "$v ttv rc $?"; grep -iE "new.process|warm|goal" $OUT/ttv_$v.log | cut -c1-300 | head -8
done
echo "end s $(( $(date +%s) - START ))"
