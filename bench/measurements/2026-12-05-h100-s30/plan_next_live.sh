#!/bin/bash
# Prepared in session 30 (not yet run), for after plan_next.sh: whether the interpreter's garbage
# collections sit in the live streams' chunk latency. bench_live now reports, per run, the
# collections meanwhile (`collector`: python_gc seconds, python_gc_full count, python_gc_longest).
# A full collection holds the GIL that the motion and render threads both need, for 0.1-0.3 s in a
# process that imported Inductor (ComfyUI's, session 30). One stream and 8 / 10 streams, 25 steps.
# Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((560 - $(date +%s) + START)) python3 -m bench.bench_live --hubert $H --streams 8 10 --seconds 12 \
  --parts one_stream concurrency --every-level --out $OUT/live_collector.json > $OUT/live_collector.log 2>&1
echo "live rc $?"
grep -E "setup_s|'variant'|collector|Error" $OUT/live_collector.log | cut -c1-700 | tail -12
