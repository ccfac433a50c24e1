#!/bin/bash
# Device call 2 (session 24): session 23's plan_next_2.sh as it was: bench_live at 8, 10 and 12 streams (25 steps),
# then the GPU tests session 23's call 3 did not reach (AOT packages left out).
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 420 python3 -m bench.bench_live --hubert $H --streams 8 10 12 --seconds 8 --parts concurrency --out $OUT/live.json > $OUT/live.log 2>&1; echo "live rc $?"
grep -E "setup_s|streams|admits|Error" $OUT/live.log | cut -c1-600 | tail -12
echo "live s $SECONDS"; SECONDS=0
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 30 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_appearance_extractor.py tests/test_audio_hubert.py tests/test_batch_local.py tests/test_conditions.py tests/test_hardening_models.py tests/test_hardening_soak.py tests/test_hubert_torch.py tests/test_motion_stitch.py tests/test_registration_end_to_end.py > $OUT/gpu_tests.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error|^FAILED" $OUT/gpu_tests.log | head -14 | cut -c1-300
