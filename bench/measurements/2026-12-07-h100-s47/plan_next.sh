#!/bin/bash
# The next device call (about 540 s, any machine), written in session 47 as its call 2, which never
# got a machine; run from main with the graph-tree change merged:
# 1. the graph-tree GPU test (its replaying and recompiling forms) three times;
# 2. the GPU tests of every file that records, synchronises or renders from graph trees;
# 3. with the time left, bench_live at 10 streams: this tree, then a copy with the change reversed
#    (graph_tree_turn_v2.patch), then this tree again.
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json",
#        ".carry/shared/reference/cases"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-540}
O=/tmp/o2; mkdir -p $O
D=$PWD/bench/measurements/2026-12-07-h100-s47
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
gpu_pytest() { timeout $1 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short "${@:2}"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
for i in 1 2 3; do
  gpu_pytest 150 tests/test_warp_decode.py -k graph_tree_records > $O/graph_tree_$i.log 2>&1
  stamp "graph-tree test $i" $?; grep -E "PASSED|FAILED|ERROR|^E " $O/graph_tree_$i.log | cut -c1-200 | head -8
done; pack
gpu_pytest $(( $(left) - 150 )) tests/test_warp_decode.py tests/test_cuda_graphs.py tests/test_lmdm_sampler.py \
  tests/test_live_render.py tests/test_live_gpu.py -k "not graph_tree_records" > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; grep -E "PASSED|FAILED|ERROR" $O/gpu_tests.log | cut -c1-160; tail -1 $O/gpu_tests.log; pack
wait $HUBERT_PID
rm -rf /tmp/m && mkdir /tmp/m && cp -r ditto_core bench tests nodes __init__.py pyproject.toml /tmp/m/ \
  && (cd /tmp/m && git apply -R $D/graph_tree_turn_v2.patch) || exit 1
live() {  # name dir
  [ $(left) -gt 60 ] || return
  (cd $2 && timeout $(( $(left) - 10 )) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 \
    --parts concurrency --streams 10 --out $O/live_$1.json > $O/live_$1.log 2>&1)
  stamp "live $1" $?; pack
}
live main $PWD
live reversed /tmp/m
live main2 $PWD
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py main=$O/live_main.json reversed=$O/live_reversed.json \
  main2=$O/live_main2.json 2>&1 | tail -12; pack
