#!/bin/bash
# Device call 2 (session 16): time to video with and without the primed eager path (each
# variant with its own empty caches: first ever, new process, warm process), a profiled new
# process of each; the GPU tests of this session's changes; the delivered frames/s on this host.
set -u
START=$(date +%s)
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s16/preamble.sh
echo "preamble s $(( $(date +%s) - START ))"; SECONDS=0
timeout 270 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli-noprime cli --profile --profile-dir $OUT --out $OUT/ttv_2.json > $OUT/ttv_2.log 2>&1; echo "ttv rc $?"; grep -vE "Warning|warn" $OUT/ttv_2.log | grep -E "^example|goal|Error" | cut -c1-400
echo "ttv s $SECONDS"; SECONDS=0
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short --timeout 90 tests/test_warp_decode.py -k "prim" tests/test_hubert_torch.py > $OUT/gpu_tests_2.log 2>&1
echo "tests rc $?"; grep -E "^E |Error|passed|failed|^FAILED" $OUT/gpu_tests_2.log | head -20 | cut -c1-300
echo "tests s $SECONDS"; SECONDS=0
LEFT=$((570 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m bench.bench_delivered --presets ultrafast superfast --layouts 1 --frames 400 --out $OUT/delivered_2.json > $OUT/delivered_2.log 2>&1; echo "delivered rc $?"; grep -E "GPU side|ultrafast:|superfast:|Error" $OUT/delivered_2.log | cut -c1-700
echo "delivered s $SECONDS"
