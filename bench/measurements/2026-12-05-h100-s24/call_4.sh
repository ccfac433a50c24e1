#!/bin/bash
# Device call 4 (session 24): time to video, the CLI's policy (eager under 2,500 frames) and ComfyUI's
# (foreground compile), three new processes of each in turn.
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh; timeout 500 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 150 --clips example --warmups cli foreground --repeats 3 --out $OUT/ttv_cli_fg.json > $OUT/ttv_cli_fg.log 2>&1; echo "rc $?"; grep -E "^example" $OUT/ttv_cli_fg.log | cut -c1-400
