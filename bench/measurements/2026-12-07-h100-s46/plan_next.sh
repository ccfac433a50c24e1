#!/bin/bash
# Prepared in session 46 for the next device call (about 380 s, a fresh machine, an H200 if one comes):
# 1. graph_tree_probe.py (call2.sh's runs): which call of the graph-tree test warms up or records
#    without the turn, and whether every graph-tree call taking the turn ("all") passes;
# 2. the CLI's time to video with the GPU's context made while torch imports (cli) against
#    torch's own first CUDA call (cli-latecuda), new processes in turn: the 5-s goal on an H200.
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-380}
O=/tmp/o; mkdir -p $O
D=$PWD/bench/measurements/2026-12-07-h100-s46
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
(OUT=$O bash $D/call2.sh) > $O/probe_summary.log 2>&1
cat $O/probe_summary.log; pack
wait $HUBERT_PID
timeout $(( $(left) - 5 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-latecuda --repeats 4 \
  --out $O/ttv_cuda_start.json > $O/ttv_cuda_start.log 2>&1
echo "ttv rc $? s $(( $(date +%s) - START ))"; grep -E "^example/" $O/ttv_cuda_start.log | cut -c1-330; pack
