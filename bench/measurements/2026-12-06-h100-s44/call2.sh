#!/bin/bash
# Session 44, call 2: the details of call 1's three warp+decode failures (call 1's pytest was cut by
# its timeout before it printed them), then the live GPU tests on their own, with tracebacks.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
O=/tmp/o2; mkdir -p $O
pack() { tar -C $O -czf $OUT/call2.tgz . ; }
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout 200 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=long tests/test_warp_decode.py \
  --junitxml=$O/warp.xml > $O/warp.log 2>&1
echo "warp rc $? s $(( $(date +%s) - START ))"; grep -E "PASSED|FAILED|ERROR" $O/warp.log | cut -c1-200; pack
timeout 300 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=long tests/test_live_gpu.py \
  -o faulthandler_timeout=240 --junitxml=$O/live.xml > $O/live.log 2>&1
echo "live rc $? s $(( $(date +%s) - START ))"; grep -E "PASSED|FAILED|ERROR" $O/live.log | cut -c1-200; pack
