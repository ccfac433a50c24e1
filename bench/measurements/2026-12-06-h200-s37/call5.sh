#!/bin/bash
# Session 37, call 5 (same H200, caches warm), one command line: the live GPU tests alone (call 1
# ran them under a 260-s limit shared with three other files, which cut them off).
set -u; OUT=$(cd "$OUT" && pwd); NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
S=$SECONDS; timeout 400 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE --durations=10 tests/test_live_gpu.py > $OUT/gpu_live.log 2>&1; echo "live tests rc $? s $((SECONDS-S))"; tail -25 $OUT/gpu_live.log | cut -c1-300
