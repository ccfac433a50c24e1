#!/bin/bash
# Device call 1 (session 13): the GPU tests that failed in session 12's call 2, a profiled
# new-process CLI time to video, where a live round's time goes, and the AOT test's load check.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_appearance_extractor.py tests/test_batch_local.py "tests/test_hardening_models.py::test_failed_set_load_leaves_nothing_loaded" > $OUT/failed_three.log 2>&1; echo "three rc $?"; grep -E "^E |Error|passed|failed" $OUT/failed_three.log | head -30 | cut -c1-300
echo "three s $SECONDS"; SECONDS=0
timeout 130 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli --profile --profile-dir $OUT --out $OUT/ttv.json > $OUT/ttv.log 2>&1; grep -vE "Warning|warn" $OUT/ttv.log | grep -E "^example|goal" | cut -c1-330
python3 -c "
import pstats; s = pstats.Stats('$OUT/example_cli_profiled.pstats'); s.sort_stats('cumulative').print_stats(70)" > $OUT/profile_cumulative.txt 2>&1
python3 -c "
import pstats; s = pstats.Stats('$OUT/example_cli_profiled.pstats'); s.sort_stats('tottime').print_stats(40)" > $OUT/profile_tottime.txt 2>&1
echo "ttv s $SECONDS"; SECONDS=0
timeout 200 python3 bench/measurements/2026-12-03-h200-s13/live_stages.py $H 8 > $OUT/live_stages.log 2>&1; echo "live rc $?"; tail -3 $OUT/live_stages.log | cut -c1-2500
echo "live s $SECONDS"; SECONDS=0
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short "tests/test_aot_packages.py::test_cuda_package_replays_its_graph_correctly_and_a_second_process_loads_it" > $OUT/aot_test.log 2>&1; echo "aot test rc $?"; grep -E "^E |AotUnavailable|signal|passed|failed|skipped" $OUT/aot_test.log | head -12 | cut -c1-400
echo "aot test s $SECONDS"
