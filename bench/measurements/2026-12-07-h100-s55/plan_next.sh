#!/bin/bash
# The next device call (about 560 s), written in session 55 after its device time ran out:
# 1. the engine's GPU tests after the background compile's thread began to hold its engine weakly
#    (1e64f17), under PyTorch's native allocator and under cudaMallocAsync;
# 2. where a new process's first render loses 0.7 s against a warm one (session 55, H200: render 1.93 s
#    against 1.25 s, both waiting about 0.8 s for x264): the CLI's time to video with the priming's wait now
#    timed (render_waited_for_priming), full priming against the first batch's only and none, side by side.
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s55/plan_next.sh
# Carry as bench/measurements/2026-12-07-nodevice-s54/plan_next.sh (the wheels and the trimmed reference cases).
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
gpu_pytest 170 tests/test_warp_decode.py > $O/engine.log 2>&1
stamp "engine gpu tests, native allocator" $?; tail -1 $O/engine.log
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync gpu_pytest 120 tests/test_warp_decode.py > $O/engine_async.log 2>&1
stamp "engine gpu tests, cudaMallocAsync" $?; tail -1 $O/engine_async.log
grep -hE "PASSED|SKIPPED|FAILED|ERROR|^E  " $O/engine.log $O/engine_async.log | cut -c1-240 > $OUT/gpu_tests.txt
grep -vE "PASSED" $OUT/gpu_tests.txt
wait $HUBERT_PID; stamp hubert $?
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
timeout $(( $(left) - 10 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-prime1 cli-noprime \
  --repeats 3 --out $OUT/ttv_priming.json > $O/ttv.log 2>&1
stamp "ttv priming variants" $?; grep -E "^example/" $O/ttv.log | cut -c1-480
