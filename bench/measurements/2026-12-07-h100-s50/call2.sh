#!/bin/bash
# Session 50, call 2 (the machine of call 1, still warm; about 380 s): bench_live's 5-minute stream
# with warm caches: whether full collections of the interpreter come during a long stream, and what
# each costs (long_stream.collector), beside collector_after_warm_up.
# Run from main: END=380 bash bench/measurements/2026-12-07-h100-s50/call2.sh (carry as call 1)
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-380}
O=/tmp/o2; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call2.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp "preamble" 0
[ -f $H ] || { echo "no HuBERT: not the machine of call 1"; exit 3; }
timeout $(( $(left) - 10 )) python3 -m bench.bench_live --hubert $H --parts long_stream --minutes 5 \
  --streams 1 --out $O/live_long.json > $O/live_long.log 2>&1
stamp "live long" $?; grep -E "collector" $O/live_long.log | cut -c1-400
python3 -c "import json; d=json.load(open('$O/live_long.json')); print('after warm-up', d.get('collector_after_warm_up')); l=d.get('long_stream', {}); print('long', {k: l.get(k) for k in ('minutes','finished','frames','wall_s','drift_after_first_quarter','collector')})"
pack
