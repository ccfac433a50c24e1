#!/bin/bash
# Device call 2 (session 9): time to video (motion ahead of render vs serial, CLI policy), the GPU
# tests of motion-ahead and live, the 1-GPU batch overhead, the 100-render soak.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 250 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 120 --clips example --warmups foreground foreground-serial cli --out $OUT/ttv.json > $OUT/ttv.log 2>&1; grep -vE "Warning|warn" $OUT/ttv.log | tail -16
echo "ttv s $SECONDS"; SECONDS=0
DITTO_SOAK_RENDERS=100 timeout 110 python3 -m pytest -q -s -m gpu tests/test_hardening_soak.py tests/test_motion_ahead.py -p no:cacheprovider > $OUT/gpu_tests.log 2>&1; grep -E "soak of|verdict|passed|failed|Error" $OUT/gpu_tests.log | cut -c1-600 | tail -8
echo "gpu tests s $SECONDS"; SECONDS=0
timeout 100 python3 -m bench.bench_batch --gpus 1 --part batch --jobs 8 --out $OUT/batch.json > $OUT/batch.log 2>&1; grep -vE "Warning|warn" $OUT/batch.log | tail -12 | cut -c1-300
echo "batch s $SECONDS"
