#!/bin/bash
# Device call 3 (session 9): the 100-render soak (host memory verdict) and the motion-ahead GPU tests,
# which call 2's 110-s limit cut.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
DITTO_SOAK_RENDERS=100 timeout 330 python3 -m pytest -q -s -m gpu tests/test_hardening_soak.py::test_twenty_renders_keep_memory_flat tests/test_motion_ahead.py -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; grep -E "soak of|verdict|passed|failed|Error|assert" $OUT/gpu_tests.log | cut -c1-900 | tail -10
