#!/bin/bash
# Session 46, call 2 (about 120 s, any machine): graph_tree_probe.py on a copy with session 45's
# graph_tree_turn.patch applied, the branch as it is and with every graph-tree call taking the
# turn, twice each. No carry needed (toy networks).
set -u
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/g${PYTHONPATH:+:$PYTHONPATH}  # the patched copy, not this tree
D=$PWD/bench/measurements/2026-12-07-h100-s46
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf /tmp/g && mkdir /tmp/g && cp -r ditto_core bench tests nodes __init__.py pyproject.toml /tmp/g/ \
  && (cd /tmp/g && git apply --exclude="docs/*" $D/../2026-12-06-h200-s45/graph_tree_turn.patch) || exit 1
cd /tmp/g
for run in branch all branch all; do
  timeout 150 python3 $D/graph_tree_probe.py $run > $OUT/probe_$run.$SECONDS.log 2>&1
  echo "== $run rc $? at $SECONDS s"; grep -E "PASSED|FAILED" $OUT/probe_$run.*.log | tail -1
done
