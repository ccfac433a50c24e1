#!/bin/bash
# Prepared in session 45 for the call after plan_next.sh, on the same warm machine (about 420 s):
# live engines run from CUDA-graph trees under `serve`'s native allocator, so with
# graph_tree_turn.patch their warm-up's first two calls at each batch size take the recording
# turn (serving replays take none). bench_live at 10 streams, branch / main / branch (the first
# run compiles every batch size: about 160 s cold).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
O=/tmp/o2; mkdir -p $O
D=bench/measurements/2026-12-06-h200-s45
pack() { tar -C $O -czf $OUT/plan_next2.tgz . ; }
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
[ -d /tmp/g ] || { mkdir /tmp/g && cp -r ditto_core bench tests nodes docs __init__.py pyproject.toml /tmp/g/ \
  && (cd /tmp/g && patch -s -p1 < $OLDPWD/$D/graph_tree_turn.patch) || exit 1; }
live() {  # name dir limit
  (cd $2 && timeout $3 python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --parts concurrency \
    --streams 10 --out $O/live_$1.json > $O/live_$1.log 2>&1)
  echo "live $1 rc $? s $(( $(date +%s) - START ))"; pack
}
live branch /tmp/g 240
live main $PWD 90
live branch2 /tmp/g 90
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py branch=$O/live_branch.json main=$O/live_main.json \
  branch2=$O/live_branch2.json; pack
