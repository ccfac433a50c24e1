#!/bin/bash
# Prepared in session 24 for the next device session (not yet run): issue 17's concurrency with
# queued rounds joined into fuller render passes (LiveRuntime render_frames, off by default) against
# the default, side by side at 8, 10 and 12 streams (25 steps). The warm-up takes about 220 s on
# empty caches; each variant stops at its first level that misses real time.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 540 python3 -m bench.bench_live --hubert $H --streams 8 10 12 --seconds 8 --parts concurrency --render-frames 0 80 --out $OUT/live_joined.json > $OUT/live_joined.log 2>&1; echo "live rc $?"
grep -E "setup_s|'variant'|Error" $OUT/live_joined.log | cut -c1-500 | tail -12
