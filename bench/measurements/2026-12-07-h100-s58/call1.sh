#!/bin/bash
# Session 58, call 1: the first half of the whole GPU suite (`pytest -m gpu`: the engine, the image
# networks and their kernels, video, registration) while the HuBERT-large is written, then the CLI's
# new process with the first batch's priming (the default since session 57) against the full one,
# four children each in turn (session 57's plan_next, on whatever card comes).
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s58/call1.sh
# Carry [".whl", ".carry"].
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp preamble 0
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
GROUP_A="tests/test_warp_decode.py tests/test_cuda_graphs.py tests/test_decoder.py tests/test_putback.py
 tests/test_triton_kernels.py tests/test_slice_conv_triton.py tests/test_spade_norm_triton.py
 tests/test_down_pool_triton.py tests/test_tap_convs.py tests/test_warp_network.py tests/test_appearance_extractor.py
 tests/test_motion_extractor.py tests/test_video_colour.py tests/test_video_segments.py tests/test_video_writer.py
 tests/test_registration_end_to_end.py tests/test_aot_packages.py tests/test_cuda_start.py"
gpu_pytest 240 --durations=15 $GROUP_A > $O/gpu_a.log 2>&1
stamp "gpu tests, first half" $?; tail -1 $O/gpu_a.log
grep -hE "PASSED|SKIPPED|FAILED|ERROR|^E  " $O/gpu_a.log | cut -c1-240 > $OUT/gpu_tests_a.txt
grep -vE "PASSED" $OUT/gpu_tests_a.txt | head -30
sed -n '/slowest/,/passed\|failed/p' $O/gpu_a.log | head -20 > $OUT/gpu_durations_a.txt
wait $HUBERT_PID; stamp hubert $?
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
timeout $(( $(left) - 10 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-primefull \
  --repeats 4 --out $OUT/ttv_priming.json > $O/ttv.log 2>&1
stamp "ttv cli against cli-primefull" $?; grep -E "^example/" $O/ttv.log | cut -c1-480
cp $O/ttv.log $O/gpu_a.log $OUT/ 2>/dev/null
