#!/bin/bash
# Device call 1 (session 9): the live avatar benchmark (warm-up, first frame, one stream,
# A/V sync, concurrency 1..16, a 3-minute stream's memory), real-architecture HuBERT.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 440 python3 -m bench.bench_live --hubert $H --avatar $E/portrait.jpg --streams 1 4 8 12 16 --minutes 3 --out $OUT/live.json > $OUT/live.log 2>&1
echo "live rc $? s $SECONDS"; grep -vE "Warning|warn" $OUT/live.log | tail -22
