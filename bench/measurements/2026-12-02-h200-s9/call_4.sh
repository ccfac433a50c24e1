#!/bin/bash
# Device call 4 (session 9): after the motion worker's stream became one per device (call 3 found a
# cuBLAS workspace held per new stream): the 100-render soak again, then motion ahead vs serial.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
DITTO_SOAK_RENDERS=100 timeout 230 python3 -m pytest -q -s -m gpu tests/test_hardening_soak.py::test_twenty_renders_keep_memory_flat -p no:cacheprovider > $OUT/soak.log 2>&1
echo "soak rc $? s $SECONDS"; grep -oE "drift \{[^}]*\}.*|passed.*|failed.*|AssertionError.*" $OUT/soak.log | cut -c1-400 | tail -4; SECONDS=0
timeout 200 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 100 --clips example --warmups foreground foreground-serial --out $OUT/ttv.json > $OUT/ttv.log 2>&1; grep -vE "Warning|warn" $OUT/ttv.log | grep -E "^example|wrote" | cut -c1-330
echo "ttv s $SECONDS"
