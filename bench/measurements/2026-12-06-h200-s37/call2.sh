#!/bin/bash
# Session 37, call 2 (same machine as call 1, caches warm): bench_live on main (session 25's LMDM
# copies, session 36's JPEG conversion and H.264 device conversion): the first frame and one
# stream's chunk latency (JPEG, 25 steps), then 8 streams of H.264 at once.
# Carry [".whl", ".carry/shared"].
set -u
START=$(date +%s); T0=$SECONDS
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((330 - $(date +%s) + START)) python3 -m bench.bench_live --hubert $H --streams 1 --seconds 12 \
  --parts first_frame one_stream av_sync --out $OUT/live_one.json > $OUT/live_one.log 2>&1
echo "live one rc $? s $SECONDS"; grep -E "setup_s|first_frame|one_stream|p95|Error" $OUT/live_one.log | cut -c1-400 | tail -8; SECONDS=0
timeout $((585 - $(date +%s) + START)) python3 -m bench.bench_live --hubert $H --output h264 --streams 8 --seconds 12 \
  --parts concurrency --out $OUT/live_h264.json > $OUT/live_h264.log 2>&1
echo "live h264 rc $? s $SECONDS"; grep -E "setup_s|'streams'|p95|Error" $OUT/live_h264.log | cut -c1-500 | tail -8
echo "end s $(( $(date +%s) - START ))"
