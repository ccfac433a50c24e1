#!/bin/bash
# Device call 5 (session 16): delivered frames/s with the encoder threads sleeping while they wait
# for the GPU's copies, against the spinning wait, side by side; time to video with the eager path
# primed at a full batch, at the first batch only, and not at all, three new processes each in
# turn; the GPU tests of the engine (with the reference cases), the writer and the put-back.
set -u
START=$(date +%s)
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s16/preamble.sh
echo "preamble s $(( $(date +%s) - START ))"; SECONDS=0
timeout 100 python3 -m bench.bench_delivered --presets ultrafast --layouts 1 1s --frames 400 --out $OUT/delivered_5.json > $OUT/delivered_5.log 2>&1; echo "delivered rc $?"; grep -E "GPU side|ultrafast:|Error" $OUT/delivered_5.log | cut -c1-700
echo "delivered s $SECONDS"; SECONDS=0
timeout 240 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli cli-prime1 cli-noprime --repeats 3 --profile --profile-dir $OUT --out $OUT/ttv_5.json > $OUT/ttv_5.log 2>&1; echo "ttv rc $?"; grep -vE "Warning|warn" $OUT/ttv_5.log | grep -E "^example|goal|Error" | cut -c1-330
echo "ttv s $SECONDS"; SECONDS=0
rm -f $OUT/*.pstats  # the import times are what this call's profile adds; the call tree was call 4's
LEFT=$((520 - $(date +%s) + START)); [ $LEFT -gt 40 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short --timeout 200 tests/test_warp_decode.py tests/test_video_writer.py tests/test_putback.py tests/test_hubert_torch.py > $OUT/gpu_tests_5.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|^FAILED" $OUT/gpu_tests_5.log | head -20 | cut -c1-300
echo "tests s $SECONDS"
