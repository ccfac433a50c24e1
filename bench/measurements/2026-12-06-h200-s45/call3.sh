#!/bin/bash
# Session 45, call 3 (the tree at 2a36f9a): graph trees' recording at later calls inside the recording turn
# 1. its GPU test on main, then on a copy with the patch reversed (expected to fail or abort);
# 2. the warp+decode, CUDA-graph and HuBERT GPU tests (HuBERT's attention now off cuDNN);
# 3. the CLI on a 60-s clip (foreground compile: graph trees), main and the reversed copy alternating.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-540}
O=/tmp/o3; mkdir -p $O
D=bench/measurements/2026-12-06-h200-s45
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call3.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
[ -f $H ] || { python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 & }
HUBERT_PID=$!
rm -rf /tmp/r && mkdir /tmp/r && cp -r ditto_core bench tests nodes __init__.py pyproject.toml /tmp/r/ \
  && (cd /tmp/r && patch -s -R -p1 < $OLDPWD/$D/graph_tree_turn_later_calls.patch) || exit 1
gt() {  # name dir
  (cd $2 && timeout 150 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short \
    tests/test_warp_decode.py -k graph_tree_records) > $O/graph_tree_$1.log 2>&1
  stamp "graph-tree test $1" $?; grep -E "PASSED|FAILED|ERROR|^E |Abort|terminate" $O/graph_tree_$1.log | cut -c1-200 | head -8; pack
}
gt main $PWD
gt reversed /tmp/r
timeout 260 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short tests/test_warp_decode.py \
  tests/test_cuda_graphs.py tests/test_hubert_torch.py > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; grep -E "PASSED|FAILED|ERROR" $O/gpu_tests.log | cut -c1-160; pack
wait $HUBERT_PID 2>/dev/null
ttv() {  # name dir
  [ $(left) -gt 70 ] || return
  (cd $2 && timeout $(( $(left) - 10 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
    --image $OLDPWD/$E/portrait.jpg --audio $OLDPWD/$E/speech_24k_mono.wav --clips 60s --warmups cli --repeats 2 \
    --out $O/ttv60_$1.json > $O/ttv60_$1.log 2>&1)
  stamp "ttv 60s $1" $?; grep -E "^60s/cli" $O/ttv60_$1.log | cut -c1-240; pack
}
ttv main $PWD
ttv reversed /tmp/r
ttv main2 $PWD
pack
