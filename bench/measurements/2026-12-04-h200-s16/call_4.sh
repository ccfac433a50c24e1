#!/bin/bash
# Device call 4 (session 16): time to video after the eager launch stopped importing the Triton
# tracing wrapper and with the children keeping their bytecode (primed and not, profiled); the
# delivered frames/s (call 2's run stopped at the bench's layout bug); GPU tests of the touched code.
set -u
START=$(date +%s)
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s16/preamble.sh
echo "preamble s $(( $(date +%s) - START ))"; SECONDS=0
timeout 200 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli-noprime cli --profile --profile-dir $OUT --out $OUT/ttv_4.json > $OUT/ttv_4.log 2>&1; echo "ttv rc $?"; grep -vE "Warning|warn" $OUT/ttv_4.log | grep -E "^example|goal|Error" | cut -c1-400
echo "ttv s $SECONDS"; SECONDS=0
timeout 170 python3 -m bench.bench_delivered --presets ultrafast superfast --layouts 1 --frames 400 --out $OUT/delivered_4.json > $OUT/delivered_4.log 2>&1; echo "delivered rc $?"; grep -E "GPU side|ultrafast:|superfast:|Error" $OUT/delivered_4.log | cut -c1-700
echo "delivered s $SECONDS"; SECONDS=0
LEFT=$((570 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short --timeout 200 tests/test_hubert_torch.py tests/test_putback.py tests/test_video_writer.py tests/test_cuda_graphs.py tests/test_warp_decode.py > $OUT/gpu_tests_4.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|^FAILED" $OUT/gpu_tests_4.log | head -20 | cut -c1-300
echo "tests s $SECONDS"
