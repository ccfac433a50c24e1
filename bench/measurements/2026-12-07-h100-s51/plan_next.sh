#!/bin/bash
# The next device call (about 570 s, any machine; an H200 wanted for the CLI's 5-s goal), written in session 51:
# 1. the step graphs' bit-for-bit GPU tests under the real cudaMallocAsync (session 51's call 1 did not reach them);
# 2. bench_time_to_video under ComfyUI's allocator: the pack's mode (background) recording steps, every
#    pipeline's default since session 51, against whole windows (background-windowgraph), three new processes
#    each in turn;
# 3. the CLI (cli) on whatever machine came.
# Run from main: END=570 bash bench/measurements/2026-12-07-h100-s51/plan_next.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-570}
O=/tmp/o1; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUB=$!
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 120 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider \
  -p no:randomly --no-header -rfE --tb=short tests/test_lmdm_sampler.py -k step_graphs_replay > $O/async_step_tests.log 2>&1
ASYNC=$?; stamp "async step tests" $ASYNC; grep -E "PASSED|SKIPPED|FAILED|ERROR|Aborted" $O/async_step_tests.log | cut -c1-160; pack
wait $HUB; stamp "hubert" $?
ttv() {  # name allocator-setting variants...
  timeout $(( $(left) - 15 )) env ${2:+PYTORCH_CUDA_ALLOC_CONF=$2} python3 -m bench.bench_time_to_video --models /tmp/models \
    --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups "${@:3}" --repeats 3 \
    --out $O/ttv_$1.json > $O/ttv_$1.log 2>&1
  stamp "ttv $1" $?; grep -E "^example/" $O/ttv_$1.log | cut -c1-420; pack
}
[ $ASYNC = 0 ] && ttv comfy_allocator backend:cudaMallocAsync background background-windowgraph
[ $(left) -gt 120 ] && ttv cli "" cli
pack
