#!/bin/bash
# Session 45, call 2: bench_live 10 / 12 streams on main, on the HuBERT-attention branch, on main again.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
O=/tmp/o2; mkdir -p $O
pack() { tar -C $O -czf $OUT/call2.tgz . ; }
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
[ -f $H ] || python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1
rm -rf /tmp/b && mkdir /tmp/b && cp -r ditto_core bench tests nodes __init__.py pyproject.toml /tmp/b/ && (cd /tmp/b && patch -s -p1 < $OLDPWD/bench/measurements/2026-12-06-h100-s44/hubert_sdpa.patch) || exit 1
live() {  # name dir
  (cd $2 && timeout 170 python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --parts concurrency \
    --streams 10 12 --out $O/live_$1.json > $O/live_$1.log 2>&1)
  echo "live $1 rc $? s $(( $(date +%s) - START ))"; pack
}
live main $PWD
live branch /tmp/b
[ $(( 560 - $(date +%s) + START )) -gt 170 ] && live main2 $PWD
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py main=$O/live_main.json branch=$O/live_branch.json main2=$O/live_main2.json; pack
