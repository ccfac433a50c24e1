#!/bin/bash
# Session 53, call 1 (about 280 s of device time were left): on an H200, the goal's GPU, first the CLI's
# time to video (not measured on one since the step graphs); then, on any machine, session 52's call 2
# (graph_span_probe.py: ComfyUI's first-prompt path under its cudaMallocAsync, the LMDM recording one step
# against whole windows, one job per process, alternating) for as long as the call lasts.
# Run from main: END=280 bash bench/measurements/2026-12-07-h100-s53/call1.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-280}
O=/tmp/o1; mkdir -p $O
P=bench/measurements/2026-12-07-h100-s52/graph_span_probe.py
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call1.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
export PYTHONPATH=$PWD:$PYTHONPATH
stamp preamble 0
if [[ $GPU == *H200* ]]; then
  timeout $(( $(left) - 15 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg \
    --audio $E/speech_24k_mono.wav --clips example --warmups cli --repeats 3 --out $O/ttv_cli.json > $O/ttv_cli.log 2>&1
  stamp "ttv cli" $?; grep -E "^example/" $O/ttv_cli.log | cut -c1-420; pack
fi
for round in first 1 2 3 4 5; do
  for span in step window; do
    [ $(left) -lt 35 ] && break 2
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $(( $(left) - 10 )) python3 $P $span \
      /tmp/models $E/portrait.jpg $E/speech_24k_mono.wav $O/${span}_$round.json 1 > $O/${span}_$round.txt 2>>$O/stderr.log
    stamp "$span $round" $?; head -1 $O/${span}_$round.txt | cut -c1-400
    pack
  done
done
pack
