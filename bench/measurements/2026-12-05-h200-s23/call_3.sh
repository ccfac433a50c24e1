#!/bin/bash
# Device call 3 (session 23): the remaining GPU tests (HuBERT, registration, hardening, batch,
# conditions, AOT packages, motion stitch), then issue 17's load calibration with the time left:
# bench_live at 8 and 10 streams, 25 steps, recording what --max-load 0.8 would admit beside
# whether each level kept real time. Cases carried: appearance_extractor.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_appearance_extractor.py tests/test_aot_packages.py tests/test_audio_hubert.py tests/test_batch_local.py tests/test_conditions.py tests/test_hardening_models.py tests/test_hardening_soak.py tests/test_hubert_torch.py tests/test_motion_stitch.py tests/test_registration_end_to_end.py > $OUT/gpu_tests_3.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error|^FAILED" $OUT/gpu_tests_3.log | head -14 | cut -c1-300
echo "tests s $SECONDS"; SECONDS=0
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 120 ] || exit 0
timeout $LEFT python3 -m bench.bench_live --hubert $H --streams 8 10 --seconds 8 --parts concurrency --out $OUT/live_3.json > $OUT/live_3.log 2>&1; echo "live rc $?"
grep -E "setup_s|streams|admits|Error" $OUT/live_3.log | cut -c1-600 | tail -12
echo "live s $SECONDS"
