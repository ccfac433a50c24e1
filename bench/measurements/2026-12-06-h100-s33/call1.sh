#!/bin/bash
# Session 33, call 1: session 32's plan_next.sh (the freeze fix in a real ComfyUI on the GPU: packs
# "main" and "before" = main with freeze_fix.patch reversed, two relaunches each), then
# first_prompt_probe.py (where a new process's first clip loses its time; four variants, two
# processes each, alternating, ComfyUI's allocator). Carry [".whl", ".carry"].
set -u
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader; python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__)"
S=bench/measurements/2026-12-06-h100-s33
# plan_next.sh's own budget ends 588 s after its start: give it 400 s of this call.
sed 's/timeout $((588 /timeout $((400 /' bench/measurements/2026-12-06-h100-s32/plan_next.sh > /tmp/plan_next.sh
bash /tmp/plan_next.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
mkdir -p $OUT/probe
for round in 1 2; do
  for v in main nocudnnsdp lmdmfirst noprime; do
    left=$((585 - $(date +%s) + START)); [ $left -lt 45 ] && break 2
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 40 python3 $S/first_prompt_probe.py $v /tmp/models \
      $E/portrait.jpg $E/speech_24k_mono.wav $OUT/probe/${v}_$round.json 2>>$OUT/probe/stderr.log | head -1 | cut -c1-400
  done
done
rm -f $OUT/probe/*.mp4; rm -rf $OUT/probe/avatars
