#!/bin/bash
# Device call 1 (session 12): time to video with Dynamo kept out of an eager new process, the
# preset-aware one-encoder thread default, why a fresh process segfaults loading a CUDA AOT
# package (a tiny module, then the GPU test's second process with the fault handler on).
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 200 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli foreground --profile --profile-dir $OUT --out $OUT/ttv.json > $OUT/ttv.log 2>&1; grep -vE "Warning|warn" $OUT/ttv.log | grep -E "^example|goal" | cut -c1-330
echo "ttv s $SECONDS"; SECONDS=0
timeout 80 python3 -m bench.bench_delivered --presets superfast medium --layouts 1 --frames 400 --out $OUT/delivered_preset_default.json > $OUT/delivered.log 2>&1; grep -vE "Warning|warn" $OUT/delivered.log | tail -4 | cut -c1-400
echo "delivered s $SECONDS"; SECONDS=0
timeout 100 python3 bench/measurements/2026-12-03-h200-s12/aot_probe.py /tmp/aot_probe > $OUT/aot_probe.log 2>&1; grep SUMMARY $OUT/aot_probe.log
echo "probe s $SECONDS"; SECONDS=0
PYTHONFAULTHANDLER=1 timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider "tests/test_aot_packages.py::test_cuda_package_replays_its_graph_correctly_and_a_second_process_loads_it" > $OUT/aot_test.log 2>&1; echo "aot test rc $?"; grep -E "File \"|Fatal|Segmentation|passed|failed" $OUT/aot_test.log | head -30 | cut -c1-250
echo "aot test s $SECONDS"
