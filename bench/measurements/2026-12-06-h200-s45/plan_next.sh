#!/bin/bash
# Prepared in session 45 for the next device call (about 560 s on one GPU, a fresh machine).
# graph_tree_turn.patch (branch s45-graph-tree-turn): an engine's CUDA-graph-tree calls that may
# record (a thread's first two at each shape: the manager's first graph and the compile, then the
# step's graph) hold the recording turn; replays take none.
# 1. its GPU test, then every warp+decode, CUDA-graph and LMDM GPU test (main's LMDM compile now
#    marked: ce42d09), on a copy with the patch applied;
# 2. the CLI on a 60-s clip (a foreground compile: graph trees), main and the copy alternating:
#    does holding the turn cost a warm render anything, and does a compile ever hang?
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json",
#        ".carry/shared/reference/cases"] (cases: warp_network.pt only).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-560}
O=/tmp/o; mkdir -p $O
D=bench/measurements/2026-12-06-h200-s45
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/g && mkdir /tmp/g && cp -r ditto_core bench tests nodes docs __init__.py pyproject.toml /tmp/g/ \
  && (cd /tmp/g && patch -s -p1 < $OLDPWD/$D/graph_tree_turn.patch) || exit 1
(cd /tmp/g && timeout 150 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short \
  tests/test_warp_decode.py -k graph_tree_records) > $O/graph_tree.log 2>&1
stamp "graph-tree test" $?; grep -E "PASSED|FAILED|ERROR|^E " $O/graph_tree.log | cut -c1-200 | head -8; pack
(cd /tmp/g && timeout 270 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short \
  tests/test_warp_decode.py tests/test_cuda_graphs.py tests/test_lmdm_sampler.py -k "not graph_tree_records") > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; grep -E "PASSED|FAILED|ERROR" $O/gpu_tests.log | cut -c1-160; pack
wait $HUBERT_PID
ttv() {  # name dir
  [ $(left) -gt 60 ] || return
  (cd $2 && timeout $(( $(left) - 5 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
    --image $OLDPWD/$E/portrait.jpg --audio $OLDPWD/$E/speech_24k_mono.wav --clips 60s --warmups cli --repeats 2 \
    --out $O/ttv60_$1.json > $O/ttv60_$1.log 2>&1)
  stamp "ttv 60s $1" $?; grep -E "^60s/cli" $O/ttv60_$1.log | cut -c1-240; pack
}
ttv branch /tmp/g
ttv main $PWD
ttv branch2 /tmp/g
pack
