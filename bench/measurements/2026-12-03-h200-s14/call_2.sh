#!/bin/bash
# Device call 2 (session 14): the live benchmark after the CUDA-graph owners got capture streams
# of their own (session 13's concurrency part was cut by HuBERT's fp16 fallback and time).
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 570 python3 -m bench.bench_live --hubert $H --streams 1 4 8 12 16 --seconds 10 --minutes 0.5 --out $OUT/live.json > $OUT/live.log 2>&1; echo "live rc $?"; grep -vE "Warning|warn" $OUT/live.log | cut -c1-400 | tail -14
echo "live s $SECONDS"
