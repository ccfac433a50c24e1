#!/bin/bash
# The next device call (about 560 s, any machine; an H200 wanted for the 5-s goal), written in session 49:
# 1. bench_time_to_video, the CLI's new process with its start-up frozen and without (cli, cli-nofreeze),
#    four children each in turn, real-architecture HuBERT, the example;
# 2. bench_live at 10 streams, then a 5-minute stream: what one full collection of the interpreter costs
#    a warmed-up live process (collector_after_warm_up: objects walked, seconds) and whether full
#    collections come during a long stream (long_stream.collector). If they come and cost tens of ms,
#    `serve` should freeze what its warm-up leaves (collected first), as the CLI's render does.
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s49/plan_next.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-560}
O=/tmp/o4; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1
stamp "hubert" $?
timeout $(( $(left) - 300 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-nofreeze --repeats 4 \
  --out $O/ttv.json > $O/ttv.log 2>&1
stamp "ttv" $?; grep -E "^example/" $O/ttv.log | cut -c1-420; pack
timeout $(( $(left) - 10 )) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --streams 10 \
  --parts concurrency long_stream --minutes 5 --out $O/live.json > $O/live.log 2>&1
stamp "live" $?; grep -E "collector_after_warm_up|^concurrency" $O/live.log | cut -c1-400
python3 -c "import json; d=json.load(open('$O/live.json')); print(d.get('collector_after_warm_up'), d.get('long_stream', {}).get('collector'))"
pack
