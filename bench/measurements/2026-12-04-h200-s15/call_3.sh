#!/bin/bash
# Device call 3 (session 15): the live benchmark after the batched, graph-replayed stitching
# (one-stream chunk latency and the concurrency levels, never measured since session 13's
# HuBERT batching), then the soak test with its baseline at the second render and the probe
# naming the allocation that appears in the second render.
set -u
T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s15/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 330 python3 -m bench.bench_live --hubert $H --streams 1 4 8 12 16 --seconds 8 --minutes 0.5 --out $OUT/live_3.json > $OUT/live_3.log 2>&1; echo "live rc $?"
grep -vE "Warning|warn\(|^\s*$" $OUT/live_3.log | tail -12 | cut -c1-900
echo "live s $SECONDS"; SECONDS=0
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -s "tests/test_hardening_soak.py::test_twenty_renders_keep_memory_flat" > $OUT/soak_3.log 2>&1
echo "soak rc $?"; grep -E "^E |soak of|passed|failed" $OUT/soak_3.log | head -8 | cut -c1-600
echo "soak s $SECONDS"; SECONDS=0
timeout 60 python3 bench/measurements/2026-12-04-h200-s15/soak_probe.py $E > $OUT/soak_probe_3.log 2>&1; echo "probe rc $?"; grep -vE "Warning|warn\(" $OUT/soak_probe_3.log | head -20 | cut -c1-1200
echo "probe s $SECONDS"
