#!/bin/bash
# Prepared in session 40 for the next device call (its device time was spent during call 4's
# warm-up): motion_sms.patch in a copy of the tree, bench_live at 10 and 12 streams with 16 SMs
# set apart, then main on the same machine with motion rounds at least 0 and 0.1 s apart
# (LiveRuntime.round_interval, side by side in one process), then the patch's GPU test.
# About 230 s of cold warm-up each on a fresh machine (the second process's compile is warm).
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
HERE=$PWD
D=bench/measurements/2026-12-06-h100-s40
left() { echo $(($1 - $(date +%s) + START)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/after && cp -r $HERE /tmp/after && (cd /tmp/after && git apply $HERE/$D/motion_sms.patch) || exit 1
echo "preamble s $(( $(date +%s) - START ))"
(cd /tmp/after && PYTHONPATH=/tmp/after:/tmp/site timeout $(left 330) python3 -m bench.bench_live --hubert $H \
  --every-level --seconds 10 --motion-sms 16 --parts concurrency --streams 10 12 --out $OUT/live_green.json \
  > $OUT/live_green.log 2>&1)
echo "green rc $? s $(( $(date +%s) - START ))"
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py green=$OUT/live_green.json
timeout $(left 520) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --round-interval 0 0.1 \
  --parts concurrency --streams 10 12 --out $OUT/live_main.json > $OUT/live_main.log 2>&1
echo "main rc $? s $(( $(date +%s) - START ))"
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py main=$OUT/live_main.json
(cd /tmp/after && timeout $(left 595) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE -s \
  tests/test_live_gpu.py -k "sms_set_apart" > $OUT/gpu_green_test.log 2>&1)
echo "gpu test rc $? s $(( $(date +%s) - START ))"; grep -E "SMs:|largest|passed|failed" $OUT/gpu_green_test.log | head -4
