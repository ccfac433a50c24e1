#!/bin/bash
# Session 40, call 4 (call 3 cut down to the device time left): the live render in a green
# context over all SMs but 16 (LiveRuntime motion_sms=16), JPEG, 25 steps, 12 streams; main's
# 12 streams on this kind from call 1 (another machine).
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
left() { echo $(($1 - $(date +%s) + START)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout $(left 290) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --motion-sms 16 \
  --parts concurrency --streams 12 --out $OUT/live_green.json > $OUT/live_green.log 2>&1
echo "green rc $? s $(( $(date +%s) - START ))"; grep -iE "error|Unavailable" $OUT/live_green.log | head -3 | cut -c1-300
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py green=$OUT/live_green.json
if [ $(left 300) -gt 45 ]; then
  timeout $(left 300) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE -s \
    tests/test_live_gpu.py -k "sms_set_apart" > $OUT/gpu_green_test.log 2>&1
  echo "gpu test rc $? s $(( $(date +%s) - START ))"; grep -E "SMs:|largest|passed|failed|Error" $OUT/gpu_green_test.log | head -5 | cut -c1-250
fi
