#!/bin/bash
# Session 44, call 3 (warm H100): the warp+decode GPU tests with their reference cases carried
# (call 2's three failures were the missing case file), then bench_live 10 and 12 streams.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
O=/tmp/o3; mkdir -p $O
pack() { tar -C $O -czf $OUT/call3.tgz . ; }
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
timeout 150 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short tests/test_warp_decode.py \
  -k "matches_eager_fp32 or half_precision" > $O/warp.log 2>&1
echo "warp rc $? s $(( $(date +%s) - START ))"; grep -E "PASSED|FAILED|ERROR|^E " $O/warp.log | cut -c1-200; pack
timeout $(( 540 - $(date +%s) + START )) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --parts concurrency \
  --streams 10 12 --out $O/live.json > $O/live.log 2>&1
echo "live rc $? s $(( $(date +%s) - START ))"
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py main=$O/live.json; pack
