#!/bin/bash
# Device call 2 (session 10): x264 frame threads against the render thread (delivered and x264
# alone per thread count), the default-path 100-render soak, LMDM per-window times.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 200 python3 -m bench.bench_delivered --presets ultrafast superfast --layouts 1 1x8 1x12 1x14 1x16 1x24 --frames 400 --out $OUT/delivered_threads.json > $OUT/delivered_threads.log 2>&1; grep -vE "Warning|warn" $OUT/delivered_threads.log | tail -4 | cut -c1-600
echo "delivered s $SECONDS"; SECONDS=0
DITTO_SOAK_RENDERS=100 timeout 250 python3 -m pytest -q -s -m gpu tests/test_hardening_soak.py::test_twenty_renders_keep_memory_flat -p no:cacheprovider > $OUT/soak.log 2>&1
echo "soak rc $? s $SECONDS"; grep -oE "drift \{[^}]*\}.*|passed.*|failed.*|AssertionError.*" $OUT/soak.log | cut -c1-400 | tail -4; SECONDS=0
timeout 90 python3 -m bench.bench_lmdm --steps 25 --compile --reps 20 --naive-reps 1 --out $OUT/lmdm.json > $OUT/lmdm.log 2>&1; grep -vE "Warning|warn" $OUT/lmdm.log | tail -12 | cut -c1-300
echo "lmdm s $SECONDS"
