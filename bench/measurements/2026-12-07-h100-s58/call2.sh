#!/bin/bash
# Session 58, call 2 (call 1's machine, warm): the second half of the whole GPU suite (the LMDM
# sampler, live, HuBERT, hardening, batch, conditions, stitching), after call 1's failures alone.
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s58/call2.sh
# Carry [".whl", ".carry"].
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp preamble 0
# Call 1's first half ran out of its 240 s at the AOT package test; three of its tests failed or
# errored there without their reports. Again, alone, with their tracebacks.
gpu_pytest 120 tests/test_putback.py::test_triton_parity_and_agreement_with_torch \
  tests/test_appearance_extractor.py::test_reference_parity_cuda tests/test_motion_extractor.py::test_reference_parity_cuda \
  > $O/gpu_a_again.log 2>&1
stamp "call 1's failures again" $?; tail -1 $O/gpu_a_again.log; grep -E "^E  |Error" $O/gpu_a_again.log | head -20
cp $O/gpu_a_again.log $OUT/ 2>/dev/null
GROUP_B="tests/test_lmdm_sampler.py tests/test_live_gpu.py tests/test_live_hubert_windows.py tests/test_live_stitch.py
 tests/test_hardening_soak.py tests/test_hardening_models.py tests/test_hubert_torch.py tests/test_audio_hubert.py
 tests/test_batch_local.py tests/test_conditions.py tests/test_motion_stitch.py"
gpu_pytest $(( $(left) - 15 )) --durations=15 $GROUP_B > $O/gpu_b.log 2>&1
stamp "gpu tests, second half" $?; tail -1 $O/gpu_b.log
grep -hE "PASSED|SKIPPED|FAILED|ERROR|^E  " $O/gpu_b.log | cut -c1-240 > $OUT/gpu_tests_b.txt
grep -vE "PASSED" $OUT/gpu_tests_b.txt | head -30
sed -n '/slowest/,/passed\|failed/p' $O/gpu_b.log | head -20 > $OUT/gpu_durations_b.txt
cp $O/gpu_b.log $OUT/ 2>/dev/null
