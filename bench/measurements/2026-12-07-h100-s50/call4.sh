#!/bin/bash
# Session 50, call 4 (about 450 s, fresh machine): the pipeline's LMDM samplers now record the
# prologue and one step for every offline clip (not only the CLI's): the ComfyUI pack's mode
# (background: the engine compiled on a thread, eager batches meanwhile) with it (background)
# against whole windows (background-windowgraph), four new processes each in turn, then each one's
# warm job, the example, real-architecture HuBERT.
# Run from main: END=450 bash bench/measurements/2026-12-07-h100-s50/call4.sh (carry as call 1)
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-450}
O=/tmp/o4; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call4.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp "preamble" 0
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1
stamp "hubert" $?
timeout $(( $(left) - 10 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example \
  --warmups background background-windowgraph --repeats 4 --out $O/ttv.json > $O/ttv.log 2>&1
stamp "ttv" $?; grep -E "^example/|goal" $O/ttv.log | cut -c1-430
pack
