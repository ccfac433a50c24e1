#!/bin/bash
# Device call 4 (session 15, the last 329 s of device time): the CLI's time to video after the
# put-back's host wait was removed (first ever and new process), then the soak probe (call 3 ran
# it without the repository on its path).
set -u
T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s15/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 125 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli --out $OUT/ttv_4.json > $OUT/ttv_4.log 2>&1; echo "ttv rc $?"; grep -vE "Warning|warn" $OUT/ttv_4.log | grep -E "^example|goal|Error" | cut -c1-400
echo "ttv s $SECONDS"; SECONDS=0
PYTHONPATH=$PWD:$PYTHONPATH timeout 45 python3 bench/measurements/2026-12-04-h200-s15/soak_probe.py $E > $OUT/soak_probe_4.log 2>&1; echo "probe rc $?"; grep -vE "Warning|warn\(" $OUT/soak_probe_4.log | head -20 | cut -c1-1500
echo "probe s $SECONDS"
