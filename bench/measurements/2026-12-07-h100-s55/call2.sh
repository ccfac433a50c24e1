#!/bin/bash
# Session 55, call 2: the GPU tests call 1 did not reach (its 200-s budget for the engine, CUDA-graph and
# LMDM sampler tests ran out in the LMDM sampler's compiled step graph, fp32: a fresh machine compiles
# from empty caches); the warm worker under cudaMallocAsync with the deferred compile waiting for a quiet
# spell (call 1, before: its second clip 6.82 s beside the compile); the live runtime's GPU tests with the
# time left.
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s55/call2.sh (carry as call 1's plan).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-560}
O=/tmp/o2; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
gpu_pytest() { timeout $1 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short "${@:2}"; }
nvidia-smi --query-gpu=name --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
gpu_pytest 240 tests/test_lmdm_sampler.py -k "compiled_graph_equals_eager and step or step_graphs_replay" > $O/lmdm.log 2>&1
stamp "lmdm sampler gpu tests (the rest of call 1's)" $?; tail -1 $O/lmdm.log
wait $HUBERT_PID; stamp hubert $?
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
timeout 150 env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 -m bench.bench_time_to_video \
  --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example \
  --warmups background --repeats 3 --out $OUT/ttv_worker_async.json > $O/ttv.log 2>&1
stamp "ttv worker_async" $?; grep -E "^example/" $O/ttv.log | cut -c1-420
gpu_pytest $(( $(left) - 10 )) tests/test_live_gpu.py > $O/live.log 2>&1
stamp "live gpu tests" $?; tail -1 $O/live.log
grep -hE "PASSED|SKIPPED|FAILED|ERROR|^E  " $O/lmdm.log $O/live.log | cut -c1-240 > $OUT/gpu_tests.txt
cat $OUT/gpu_tests.txt | grep -vE "PASSED"
