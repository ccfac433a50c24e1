#!/bin/bash
# Device call 2 (session 12): time to video with eager Triton launches direct (no tracing
# wrapper), a profiled new-process CLI child, and the GPU test suite but the AOT package test.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 170 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli --profile --profile-dir $OUT --out $OUT/ttv.json > $OUT/ttv.log 2>&1; grep -vE "Warning|warn" $OUT/ttv.log | grep -E "^example|goal" | cut -c1-330
python3 -c "
import json; d = json.load(open('$OUT/ttv.json'))['clips']['example/cli']
print({s: (d[s].get('process', {}).get('dynamo_imported'), d[s].get('engine')) for s in ('first_ever', 'new_process')})" 2>&1 | cut -c1-600
python3 -c "
import pstats; s = pstats.Stats('$OUT/example_cli_profiled.pstats'); s.sort_stats('cumulative').print_stats(45)" 2>&1 | grep -E "^ +[0-9]" | cut -c1-200 | head -45
echo "ttv s $SECONDS"; SECONDS=0
timeout 250 python3 -m pytest -q -m gpu tests -p no:cacheprovider --deselect "tests/test_aot_packages.py::test_cuda_package_replays_its_graph_correctly_and_a_second_process_loads_it" > $OUT/gpu_suite.log 2>&1; echo "suite rc $?"; grep -E "passed|failed|Error" $OUT/gpu_suite.log | tail -8 | cut -c1-300
echo "suite s $SECONDS"
