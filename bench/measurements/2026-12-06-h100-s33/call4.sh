#!/bin/bash
# Session 33, call 4 (the session's last device seconds): first_prompt_probe.py's "prewarmed"
# variant beside "main", alternating: would warming a process's CUDA libraries, kernels and
# encoder before the first prompt (on a throw-away pipeline here) take the first clip near a
# warm one? Carry [".whl", ".carry"].
set -u
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
export PYTHONPATH=$PWD:$PYTHONPATH
S=bench/measurements/2026-12-06-h100-s33
echo "preamble s $(( $(date +%s) - START ))"
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
mkdir -p $OUT/probe
for round in 1 2 3 4; do
  for v in main prewarmed; do
    left=$((125 - $(date +%s) + START)); [ $left -lt 20 ] && break 2
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $left python3 $S/first_prompt_probe.py $v /tmp/models \
      $E/portrait.jpg $E/speech_24k_mono.wav $OUT/probe/${v}_$round.json 1 2>>$OUT/probe/stderr.log | head -1 | cut -c1-700
  done
done
rm -f $OUT/probe/*.mp4; rm -rf $OUT/probe/avatars
