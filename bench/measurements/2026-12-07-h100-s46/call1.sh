#!/bin/bash
# Session 46, call 1 (a fresh machine, about 580 s), run from branch s46-cuda-start:
# 1. the GPU test of ditto_core/cuda_start.py (PyTorch adopts the context made while it imports);
# 2. session 45's graph-tree GPU test on a copy with graph_tree_turn.patch applied;
# 3. the CLI's time to video, the context made while torch imports (cli) against PyTorch's own
#    first CUDA call (cli-latecuda), new processes of the two in turn;
# 4. the warp+decode, CUDA-graph and LMDM GPU tests on the patched copy, with the time left.
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json",
#        ".carry/shared/reference/cases"] (cases: warp_network.pt only).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-580}
O=/tmp/o; mkdir -p $O
P=bench/measurements/2026-12-06-h200-s45/graph_tree_turn.patch
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call1.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
gpu_pytest() { timeout $1 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short "${@:2}"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp preamble 0
gpu_pytest 60 tests/test_cuda_start.py > $O/cuda_start.log 2>&1
stamp "cuda_start test" $?; grep -E "PASSED|FAILED|ERROR|^E " $O/cuda_start.log | cut -c1-200 | head -8
rm -rf /tmp/g && mkdir /tmp/g && cp -r ditto_core bench tests nodes __init__.py pyproject.toml /tmp/g/ \
  && (cd /tmp/g && git apply --exclude="docs/*" $OLDPWD/$P) || exit 1
(cd /tmp/g && gpu_pytest 150 tests/test_warp_decode.py -k graph_tree_records) > $O/graph_tree.log 2>&1
stamp "graph-tree test" $?; grep -E "PASSED|FAILED|ERROR|^E " $O/graph_tree.log | cut -c1-200 | head -8; pack
wait $HUBERT_PID
timeout $(( $(left) - 240 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-latecuda --repeats 4 \
  --out $O/ttv_cuda_start.json > $O/ttv_cuda_start.log 2>&1
stamp "ttv cuda start" $?; grep -E "^example/" $O/ttv_cuda_start.log | cut -c1-330; pack
(cd /tmp/g && gpu_pytest $(( $(left) - 5 )) tests/test_warp_decode.py tests/test_cuda_graphs.py tests/test_lmdm_sampler.py \
  -k "not graph_tree_records") > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; grep -E "PASSED|FAILED|ERROR" $O/gpu_tests.log | cut -c1-160; pack
