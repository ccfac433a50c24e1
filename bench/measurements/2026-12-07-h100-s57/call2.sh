#!/bin/bash
# Session 57, call 2: session 55's plan (plan_next.sh) less its native-allocator engine tests, which
# passed in call 1: the engine's GPU tests under cudaMallocAsync, then the CLI's time to video with full
# priming, the first batch's only, and none, side by side (render_waited_for_priming).
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s57/call2.sh
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync gpu_pytest 150 tests/test_warp_decode.py > $O/engine_async.log 2>&1
stamp "engine gpu tests, cudaMallocAsync" $?; tail -1 $O/engine_async.log
grep -hE "PASSED|SKIPPED|FAILED|ERROR|^E  " $O/engine_async.log | cut -c1-240 > $OUT/gpu_tests.txt
grep -vE "PASSED" $OUT/gpu_tests.txt
wait $HUBERT_PID; stamp hubert $?
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
timeout $(( $(left) - 10 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-prime1 cli-noprime \
  --repeats 3 --out $OUT/ttv_priming.json > $O/ttv.log 2>&1
stamp "ttv priming variants" $?; grep -E "^example/" $O/ttv.log | cut -c1-480
cp $O/ttv.log $OUT/ 2>/dev/null
