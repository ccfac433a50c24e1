#!/bin/bash
# Device call 1 (session 17): live streams in step with rounds capped at the largest render batch
# (the new default) against uncapped rounds, side by side, with each round's timings; then
# delivered frames/s with x264 opened by the writer's thread against the render waiting for the
# open (before), 400 frames, and the default layout on 1500 frames.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s17/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 330 python3 -m bench.bench_live --hubert $H --streams 8 12 16 --round-frames 0 1000 --seconds 8 --minutes 0.1 --out $OUT/live_1.json > $OUT/live_1.log 2>&1; echo "live rc $?"
grep -E "^\{'round_frames|setup_s|first_frame|one_stream|Error" $OUT/live_1.log | cut -c1-900
echo "live s $SECONDS"; SECONDS=0
LEFT=$((575 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m bench.bench_delivered --presets ultrafast --layouts 1 1w --frames 400 --cache-dir /tmp/ind --out $OUT/delivered_1.json > $OUT/delivered_1.log 2>&1; echo "delivered rc $?"; grep -E "GPU side|ultrafast:|Error" $OUT/delivered_1.log | cut -c1-700
python3 -c "import json; d=json.load(open('$OUT/delivered_1.json')); print({k: (v['runs'], v['tail_s']) for k, v in d['presets']['ultrafast']['layouts'].items()})" 2>&1 | tail -1
echo "delivered s $SECONDS"; SECONDS=0
LEFT=$((585 - $(date +%s) + START)); [ $LEFT -gt 50 ] || exit 0
timeout $LEFT python3 -m bench.bench_delivered --presets ultrafast --layouts 1 --frames 1500 --cache-dir /tmp/ind --out $OUT/delivered_1_long.json > $OUT/delivered_1_long.log 2>&1; echo "delivered long rc $?"; grep -E "GPU side|ultrafast:|Error" $OUT/delivered_1_long.log | cut -c1-700
echo "delivered long s $SECONDS"
