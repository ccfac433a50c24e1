#!/bin/bash
# Device call 2 (session 8): delivered frames/s per encoder layout (zero-copy frames), time to video
# (CLI policy vs AOT packages, fast exit), the AOT GPU tests, a short live run.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 100 python3 -m bench.bench_delivered --presets ultrafast superfast medium --layouts 1 2x7 3x5 4x3 --frames 400 --out $OUT/delivered_2.json > $OUT/delivered_2.log 2>&1; grep -E "GPU-side|wrote|Error" $OUT/delivered_2.log
echo "delivered s $SECONDS"; SECONDS=0
timeout 230 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 200 --clips example --warmups aot --out $OUT/ttv_2.json > $OUT/ttv_2.log 2>&1; tail -8 $OUT/ttv_2.log
echo "ttv s $SECONDS"; SECONDS=0
timeout 110 python3 -m pytest -q -s -m gpu tests/test_aot_packages.py tests/test_process_exit.py tests/test_video_segments.py tests/test_video_writer.py -p no:cacheprovider > $OUT/gpu_tests_2.log 2>&1; tail -5 $OUT/gpu_tests_2.log
echo "gpu tests s $SECONDS"; SECONDS=0
timeout 85 python3 -m bench.bench_live --hubert $H --avatar $E/portrait.jpg --streams 1 8 --seconds 5 --minutes 0.3 --out $OUT/live_2.json > $OUT/live_2.log 2>&1; tail -12 $OUT/live_2.log
echo "live s $SECONDS"
