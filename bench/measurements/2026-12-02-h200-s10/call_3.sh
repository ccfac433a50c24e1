#!/bin/bash
# Device call 3 (session 10): the new one-encoder default (cores - 2 frame threads) against x264's
# own choice, time to video with it, and the whole GPU test suite.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 150 python3 -m bench.bench_delivered --presets ultrafast superfast medium --layouts 1 1x24 --frames 400 --out $OUT/delivered_default.json > $OUT/delivered_default.log 2>&1; grep -vE "Warning|warn" $OUT/delivered_default.log | tail -5 | cut -c1-400
echo "delivered s $SECONDS"; SECONDS=0
timeout 190 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups foreground cli --out $OUT/ttv.json > $OUT/ttv.log 2>&1; grep -vE "Warning|warn" $OUT/ttv.log | grep -E "^example|goal" | cut -c1-330
echo "ttv s $SECONDS"; SECONDS=0
timeout 220 python3 -m pytest -q -m gpu tests -p no:cacheprovider -x > $OUT/gpu_suite.log 2>&1; echo "suite rc $?"; grep -E "passed|failed|Error" $OUT/gpu_suite.log | tail -5 | cut -c1-400
echo "suite s $SECONDS"
