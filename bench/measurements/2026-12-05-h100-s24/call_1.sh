#!/bin/bash
# Device call 1 (session 24): where loading an AOTInductor package crashes on the device's torch
# (aot_bisect.py: tiny nets, then warp+decode with our Triton kernels off and on, each in a child),
# then issue 16's delivered frames/s at ultrafast on 1500 frames with the time left.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
PROBE_SECONDS=300 timeout 320 python3 bench/measurements/2026-12-05-h100-s24/aot_bisect.py > $OUT/aot_bisect.log 2>&1; echo "bisect rc $?"
cut -c1-900 $OUT/aot_bisect.log
echo "bisect s $SECONDS"; SECONDS=0
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 90 ] || exit 0
timeout $LEFT python3 -m bench.bench_delivered --presets ultrafast --layouts 1 --frames 1500 --cache-dir /tmp/ind --out $OUT/delivered.json > $OUT/delivered.log 2>&1; echo "delivered rc $?"
grep -E "GPU side|ultrafast:|Error" $OUT/delivered.log | cut -c1-700
