#!/bin/bash
# The next device call (about 560 s, any machine; an H200 wanted for the 5-s goal), written in session 50:
# 1. the GPU tests session 50 could not run: the CUDA graphs' (among them owners dropped in cycles under
#    the real cudaMallocAsync with collections due at every allocation), then the sampler's step-graph
#    tests under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (call 6's abort);
# 2. if they pass: bench_time_to_video under ComfyUI's allocator, the pack's mode with whole windows
#    (background) against step graphs (background-stepgraph), four new processes each in turn: whether
#    ComfyUI's pipelines should record steps too (then DittoPipeline's default becomes "step");
# 3. the CLI (cli, step graphs) on whatever machine came: the 5-s goal wants an H200.
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s50/plan_next.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-560}
O=/tmp/o1; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUB=$!
timeout 150 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE --tb=short tests/test_cuda_graphs.py \
  > $O/cuda_graphs_tests.log 2>&1
stamp "cuda graphs tests" $?; tail -2 $O/cuda_graphs_tests.log
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 150 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider \
  -p no:randomly --no-header -rfE --tb=short tests/test_lmdm_sampler.py \
  -k "step_graphs_replay and True or (cuda_graph_replay_equals_eager and step) or (grad_mode and step)" \
  > $O/async_step_tests.log 2>&1
ASYNC=$?; stamp "async step tests" $ASYNC; grep -E "PASSED|FAILED|ERROR|Aborted" $O/async_step_tests.log | cut -c1-160; pack
wait $HUB; stamp "hubert" $?
ttv() {  # name allocator-setting variants...
  timeout $(( $(left) - 15 )) env ${2:+PYTORCH_CUDA_ALLOC_CONF=$2} python3 -m bench.bench_time_to_video --models /tmp/models \
    --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups "${@:3}" --repeats 4 \
    --out $O/ttv_$1.json > $O/ttv_$1.log 2>&1
  stamp "ttv $1" $?; grep -E "^example/" $O/ttv_$1.log | cut -c1-420; pack
}
[ $ASYNC = 0 ] && ttv comfy_allocator backend:cudaMallocAsync background background-stepgraph
[ $(left) -gt 120 ] && ttv cli "" cli
pack
