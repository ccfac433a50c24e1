#!/bin/bash
# Session 49, call 2 (about 560 s): what call 1 (session 48's plan_next.sh) left unrun.
# 1. tests/test_live_gpu.py on its own, with the time its fresh compile needs (call 1's limit cut it);
# 2. bench_live at 10 streams on this tree (its compile caches warmed by step 1), then on the copy with
#    the graph-tree turn reversed (session 48's patch), then this tree again: one machine, in turn.
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s49/call2.sh (carry as call 1).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-560}
O=/tmp/o2; mkdir -p $O
P=$PWD/bench/measurements/2026-12-07-nodevice-s48/graph_tree_turn_reversed_at_36f1b48.patch
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call2.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
timeout 290 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short --durations=0 \
  tests/test_live_gpu.py > $O/live_gpu_tests.log 2>&1
stamp "live gpu tests" $?; grep -E "PASSED|FAILED|ERROR|s call" $O/live_gpu_tests.log | cut -c1-160; pack
wait $HUBERT_PID
rm -rf /tmp/m && mkdir /tmp/m && cp -r ditto_core bench tests nodes __init__.py pyproject.toml /tmp/m/ \
  && (cd /tmp/m && git apply $P) || exit 1
live() {  # name dir
  [ $(left) -gt 60 ] || return
  (cd $2 && timeout $(( $(left) - 10 )) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 \
    --parts concurrency --streams 10 --out $O/live_$1.json > $O/live_$1.log 2>&1)
  stamp "live $1" $?; grep -o "'warm_up_s': [0-9.]*" $O/live_$1.log; pack
}
live main $PWD
live reversed /tmp/m
live main2 $PWD
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py main=$O/live_main.json reversed=$O/live_reversed.json \
  main2=$O/live_main2.json 2>&1 | tail -12; pack
