#!/bin/bash
# Device call 5 (session 24): the render command in its own process against handed to a warm worker.
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh; timeout 420 python3 -m bench.bench_cli_worker --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 3 --child-timeout 100 --out $OUT/cli_worker.json > $OUT/cli_worker.log 2>&1; echo "rc $?"; grep -E "^goal|median|first" $OUT/cli_worker.log | head -10 | cut -c1-400
