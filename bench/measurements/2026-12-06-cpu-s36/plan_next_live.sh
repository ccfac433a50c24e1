#!/bin/bash
# Prepared in session 36 (no device time then) for a device call after session 35's plan_next.sh:
# the live GPU tests, with session 36's new one (an H.264 stream through the device conversion
# against an RGB stream of the same speech), then bench_live with H.264 output, one stream and 8,
# the host-side change's effect on the device (JPEG's numbers: run the same with --output jpeg in
# the next call, on the same machine, before comparing). Carry [".whl", ".carry"] (or the trimmed
# list in session 35's plan_next.sh when the ComfyUI source rides along).
set -u
START=$(date +%s); T0=$SECONDS
OUT=$(cd "$OUT" && pwd)
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
export PYTHONPATH=$PWD:$PYTHONPATH
nvidia-smi --query-gpu=name --format=csv,noheader
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 240 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE -s tests/test_live_gpu.py \
  tests/test_video_colour.py > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; grep -E "h264 against|passed|failed|Error" $OUT/gpu_tests.log | cut -c1-300 | tail -6; SECONDS=0
timeout $((570 - $(date +%s) + START)) python3 -m bench.bench_live --hubert $H --output h264 --streams 8 --seconds 12 \
  --parts one_stream concurrency --out $OUT/live_h264.json > $OUT/live_h264.log 2>&1
echo "live h264 rc $? s $SECONDS"
grep -E "setup_s|'variant'|p95|Error" $OUT/live_h264.log | cut -c1-500 | tail -10
