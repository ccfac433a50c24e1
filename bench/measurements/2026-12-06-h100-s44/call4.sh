#!/bin/bash
# Session 44, call 4 (warm H100, after call 3): does the turn-taking (turns.patch = 409daff..fed0d43 in
# ditto_core and nodes) cost the live runtime anything? bench_live at 10 streams, without the patch
# (a copy of the tree with it reversed) and with it (main), alternated on one machine.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
O=/tmp/o4; mkdir -p $O
pack() { tar -C $O -czf $OUT/call4.tgz . ; }
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/old && mkdir /tmp/old && cp -r ditto_core nodes bench /tmp/old/ && (cd /tmp/old && patch -s -R -p1 < $OLDPWD/bench/measurements/2026-12-06-h100-s44/turns.patch) || exit 1
run() {  # name dir
  (cd $2 && timeout 170 python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --parts concurrency \
    --streams 10 --out $O/live_$1.json > $O/live_$1.log 2>&1)
  echo "$1 rc $? s $(( $(date +%s) - START ))"
  python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py $1=$O/live_$1.json; pack
}
run before /tmp/old
run main $PWD
[ $(( $(date +%s) - START )) -lt 330 ] && run before2 /tmp/old
