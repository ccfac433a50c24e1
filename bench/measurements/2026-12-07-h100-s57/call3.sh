#!/bin/bash
# Session 57, call 3: the live GPU tests after one_stream and motion_first came out again (main as it
# lands), then the CLI's new process with the eager path primed at both batch shapes against the first
# batch's only, five children each in turn (call 2: 6.60 against 6.35 s, three each, overlapping).
# Run from main: END=470 bash bench/measurements/2026-12-07-h100-s57/call3.sh
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
gpu_pytest 260 tests/test_live_gpu.py > $O/live_gpu.log 2>&1
stamp "live gpu tests" $?; tail -1 $O/live_gpu.log
grep -hE "PASSED|SKIPPED|FAILED|ERROR|^E  " $O/live_gpu.log | cut -c1-240 > $OUT/gpu_tests.txt
grep -vE "PASSED" $OUT/gpu_tests.txt
wait $HUBERT_PID; stamp hubert $?
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
timeout $(( $(left) - 10 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-prime1 \
  --repeats 5 --out $OUT/ttv_prime1.json > $O/ttv.log 2>&1
stamp "ttv cli against cli-prime1" $?; grep -E "^example/" $O/ttv.log | cut -c1-480
cp $O/ttv.log $OUT/ 2>/dev/null
