#!/bin/bash
# Session 47, call 3 (about 330 s, any machine; what call2.sh could not get a machine for, without
# its live runs): on branch s47-graph-tree-turn, the graph-tree GPU test (its replaying and
# recompiling forms) three times, then the GPU tests of the files that record, synchronise or
# render from graph trees. The preamble's bytecode pass over torch is skipped (tests only).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-330}
O=/tmp/o3; mkdir -p $O /tmp/pyc && touch /tmp/pyc/.done
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call3.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
gpu_pytest() { timeout $1 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short "${@:2}"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp preamble 0
for i in 1 2 3; do
  [ $(left) -gt 40 ] || break
  gpu_pytest $(( $(left) - 5 )) tests/test_warp_decode.py -k graph_tree_records > $O/graph_tree_$i.log 2>&1
  stamp "graph-tree test $i" $?; grep -E "PASSED|FAILED|ERROR|^E " $O/graph_tree_$i.log | cut -c1-200 | head -8
done; pack
[ $(left) -gt 30 ] || exit 0
gpu_pytest $(( $(left) - 5 )) tests/test_warp_decode.py tests/test_live_render.py tests/test_cuda_graphs.py \
  tests/test_lmdm_sampler.py -k "not graph_tree_records" > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; grep -E "PASSED|FAILED|ERROR" $O/gpu_tests.log | cut -c1-160; tail -1 $O/gpu_tests.log; pack
