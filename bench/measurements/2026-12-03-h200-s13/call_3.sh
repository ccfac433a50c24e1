#!/bin/bash
# Device call 3 (session 13): why call 2's live HuBERT graph reported an fp16 overflow, and
# whether two identical live streams differ by the batches' rounding or by a race
# (live_probe.py); the model-load memory test with its baseline fixed.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 200 python3 bench/measurements/2026-12-03-h200-s13/live_probe.py $H > $OUT/live_probe.log 2>&1; echo "probe rc $?"; grep -vE "Warning|warn|^\{" $OUT/live_probe.log | cut -c1-600 | tail -20
echo "probe s $SECONDS"; SECONDS=0
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_lmdm_sampler.py "tests/test_hardening_models.py::test_failed_set_load_leaves_nothing_loaded" > $OUT/tests.log 2>&1; echo "tests rc $?"; grep -E "^E |passed|failed" $OUT/tests.log | head -8 | cut -c1-300
echo "tests s $SECONDS"
