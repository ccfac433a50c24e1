#!/bin/bash
# Session 50, call 1 (about 480 s, fresh machine; an H200 asked for, for the 5-s goal):
# 1. lmdm_first_window_probe.py: a new process's first LMDM windows, the window's graph against one
#    step's graph replayed per step and against no graph, three children each in turn;
# 2. bench_time_to_video, the CLI (its start-up frozen, session 49), four new processes, the example,
#    real-architecture HuBERT;
# 3. bench_live at 10 streams (empty caches): collector_after_warm_up, the 10-stream level.
# Run from main: END=480 bash bench/measurements/2026-12-07-h100-s50/call1.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-480}
O=/tmp/o1; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call1.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp "preamble" 0
PYTHONPATH=$PWD:$PYTHONPATH timeout 120 python3 bench/measurements/2026-12-07-h100-s50/lmdm_first_window_probe.py \
  --models /tmp/models --rounds 3 --out $O/lmdm_probe.json > $O/lmdm_probe.log 2>&1
stamp "lmdm probe" $?; grep -E "against|^(window|step|eager) " $O/lmdm_probe.log | cut -c1-330; pack
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1
stamp "hubert" $?
timeout $(( $(left) - 250 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli --repeats 4 \
  --out $O/ttv.json > $O/ttv.log 2>&1
stamp "ttv" $?; grep -E "^example/|goal" $O/ttv.log | cut -c1-420; pack
timeout $(( $(left) - 10 )) python3 -m bench.bench_live --hubert $H --seconds 10 --streams 10 \
  --parts concurrency --out $O/live.json > $O/live.log 2>&1
stamp "live" $?; grep -E "collector_after_warm_up|^concurrency" $O/live.log | cut -c1-400
pack
