#!/bin/bash
# Session 33, call 2. Call 1's "main" pack never ran compiled: its first-ever launch lingered 30 s
# (plan_next.sh; session 32's call 2 lingered 60 s) and the cold compile, ~35-40 s on this host,
# was stopped with the server, so each relaunch compiled anew and was stopped again ("before",
# launched later on a warmer machine, finished within its 30 s). So: plan_next.sh again, the
# first-ever launch lingering until its compile is logged (bench_comfyui now does; 90 s at most); then first_prompt_probe.py (where a new process's first clip
# loses its time), which did not run in call 1 (it needs the checkout on PYTHONPATH).
# Carry [".whl", ".carry"].
set -u
START=$(date +%s)
S=bench/measurements/2026-12-06-h100-s33
nvidia-smi --query-gpu=name --format=csv,noheader
sed -e 's/timeout $((588 /timeout $((400 /' -e 's/--linger-after-first 30/--linger-after-first 90/' \
  bench/measurements/2026-12-06-h100-s32/plan_next.sh > /tmp/plan_next.sh
bash /tmp/plan_next.sh
grep -ho '"compile_seconds": [0-9.]*' $OUT/comfyui.json | sort | uniq -c
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
export PYTHONPATH=$PWD:$PYTHONPATH
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
mkdir -p $OUT/probe
for round in 1 2; do
  for v in main nocudnnsdp lmdmfirst noprime; do
    left=$((550 - $(date +%s) + START)); [ $left -lt 25 ] && break 2
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $left python3 $S/first_prompt_probe.py $v /tmp/models \
      $E/portrait.jpg $E/speech_24k_mono.wav $OUT/probe/${v}_$round.json 2>>$OUT/probe/stderr.log | head -1 | cut -c1-700
  done
done
rm -f $OUT/probe/*.mp4; rm -rf $OUT/probe/avatars
