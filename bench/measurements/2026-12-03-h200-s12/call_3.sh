#!/bin/bash
# Device call 3 (session 12): why three GPU tests failed in call 2 (its log was cut by the time
# limit before the summary), and the AOT package test with the new child-process load check.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_appearance_extractor.py tests/test_batch_local.py "tests/test_hardening_models.py::test_failed_set_load_leaves_nothing_loaded" > $OUT/failed_three.log 2>&1; echo "three rc $?"; grep -E "^E |Error|passed|failed" $OUT/failed_three.log | head -30 | cut -c1-300
echo "three s $SECONDS"; SECONDS=0
timeout 130 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short "tests/test_aot_packages.py::test_cuda_package_replays_its_graph_correctly_and_a_second_process_loads_it" > $OUT/aot_test.log 2>&1; echo "aot test rc $?"; grep -E "^E |AotUnavailable|signal|passed|failed" $OUT/aot_test.log | head -12 | cut -c1-400
echo "aot test s $SECONDS"
