#!/bin/bash
# Session 51, call 1 (about 570 s), on branch pipeline-step-default (every DittoPipeline's LMDM
# samplers record the prologue and one step; the live runtime keeps whole windows). Session 50's
# plan_next.sh and the branch's own checks in one call, most needed first:
# 1. the sampler's GPU tests under cudaMallocAsync (session 50's call 6 aborted there);
# 2. the CUDA graphs' GPU tests, among them owners dropped in cycles under the real cudaMallocAsync
#    with collections due at every allocation (not yet run on a GPU);
# 3. the hardening soak's GPU tests under cudaMallocAsync, whose pipelines now record steps;
# 4. bench_time_to_video under ComfyUI's allocator, the pack's mode (background: the engine
#    compiled on a thread beside eager clips) with step graphs against whole windows
#    (background-windowgraph), three new processes each in turn.
# Run from the branch (END: the seconds it may take; the benchmark needs 200 of them left): END=570 bash bench/measurements/2026-12-07-h100-s51/call1.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-570}
O=/tmp/o1; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call1.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git log --oneline -1
BENCH=$(( END >= 450 ))  # under 450 s the tests alone: no benchmark, so no bytecode or HuBERT made for one
[ $BENCH = 0 ] && mkdir -p /tmp/pyc && touch /tmp/pyc/.done
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp "preamble" 0
[ $BENCH = 1 ] && { python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 & HUB=$!; }
gpu_tests() {  # name seconds allocator-setting pytest-args...
  local limit=$(( $2 < $(left) - 10 ? $2 : $(left) - 10 ))
  timeout $limit env ${3:+PYTORCH_CUDA_ALLOC_CONF=$3} python3 -m pytest -m gpu -v -n 0 \
    -p no:cacheprovider -p no:randomly --no-header -rfE --tb=short --durations=5 "${@:4}" > $O/$1.log 2>&1
  local rc=$?; stamp "$1" $rc; grep -E "FAILED|ERROR|Aborted|passed|failed" $O/$1.log | cut -c1-200 | tail -6; pack
  return $rc
}
gpu_tests sampler_async 150 backend:cudaMallocAsync tests/test_lmdm_sampler.py -k "step or graph"
ASYNC=$?
gpu_tests cuda_graphs 120 "" tests/test_cuda_graphs.py
gpu_tests soak_async 150 backend:cudaMallocAsync tests/test_hardening_soak.py
ASYNC=$(( ASYNC + $? ))
if [ $BENCH = 1 ] && [ $ASYNC = 0 ] && [ $(left) -gt 200 ]; then
  wait $HUB; stamp "hubert" $?
  timeout $(( $(left) - 10 )) env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 -m bench.bench_time_to_video \
    --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example \
    --warmups background background-windowgraph --repeats 3 --out $O/ttv_comfy_allocator.json > $O/ttv_comfy_allocator.log 2>&1
  stamp "ttv" $?; grep -E "^example/" $O/ttv_comfy_allocator.log | cut -c1-420
elif [ $BENCH = 1 ]; then
  kill $HUB
fi
pack
