#!/bin/bash
# The next device call (about 570 s), written in session 54, which had no device time (sessions 52-53 spent it for
# the same stop). What sessions 52-53 left unmeasured:
# 1. the GPU tests of the engine, the CUDA graphs and the LMDM sampler, after session 52's change (under
#    cudaMallocAsync a background compile waits for the first clip), under PyTorch's native allocator, and the
#    engine's tests again under ComfyUI's (the live runtime's, 207 s with their fixture's compile in session 49,
#    run last with the time left);
# 2. on an H200 (the goal's GPU), the CLI's time to video: not measured on one since the LMDM's step graphs;
# 3. the warm worker's first clip under cudaMallocAsync with the change (session 52, before: 17.5-29.7 s).
# Only JSON and the lines grepped from each log go back: session 53's archive of full logs was over the limit.
# Run from main: END=570 bash bench/measurements/2026-12-07-nodevice-s54/plan_next.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json",
#        ".carry/shared/reference/cases"]
# .carry/shared/reference/cases: only the cases these tests load (warp_network, lmdm_ddim, lmdm_step,
# stitch_network, keypoint_math .pt): the whole folder beside the wheels is over the 64 MiB a call carries.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-570}
O=/tmp/o1; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
keep() { cp "$@" $OUT/ 2>/dev/null; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
gpu_pytest() { timeout $1 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short "${@:2}"; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
gpu_pytest 200 tests/test_warp_decode.py tests/test_cuda_graphs.py tests/test_lmdm_sampler.py > $O/gpu_tests.log 2>&1
stamp "gpu tests, native allocator" $?; grep -E "FAILED|ERROR" $O/gpu_tests.log | cut -c1-200; tail -1 $O/gpu_tests.log
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync gpu_pytest 150 tests/test_warp_decode.py > $O/gpu_tests_async.log 2>&1
stamp "engine gpu tests, cudaMallocAsync" $?; grep -E "FAILED|ERROR" $O/gpu_tests_async.log | cut -c1-200
tail -1 $O/gpu_tests_async.log
grep -E "PASSED|SKIPPED|FAILED|ERROR" $O/gpu_tests.log $O/gpu_tests_async.log | cut -c1-200 > $OUT/gpu_tests.txt
wait $HUBERT_PID; stamp hubert $?
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
ttv() {  # name allocator-setting warmups...
  [ $(left) -gt 100 ] || return
  timeout $(( $(left) - 15 )) env ${2:+PYTORCH_CUDA_ALLOC_CONF=$2} python3 -m bench.bench_time_to_video --models /tmp/models \
    --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups "${@:3}" --repeats 3 \
    --out $O/ttv_$1.json > $O/ttv_$1.log 2>&1
  stamp "ttv $1" $?; grep -E "^example/" $O/ttv_$1.log | cut -c1-420; keep $O/ttv_$1.json
}
[[ $GPU == *H200* ]] && ttv cli "" cli
ttv worker_async backend:cudaMallocAsync background
[[ $GPU == *H200* ]] || ttv cli "" cli
if [ $(left) -gt 230 ]; then
  gpu_pytest $(( $(left) - 10 )) tests/test_live_gpu.py > $O/live_gpu_tests.log 2>&1
  stamp "live gpu tests" $?; grep -E "PASSED|SKIPPED|FAILED|ERROR" $O/live_gpu_tests.log | cut -c1-200 >> $OUT/gpu_tests.txt
  tail -1 $O/live_gpu_tests.log
fi
