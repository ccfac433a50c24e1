#!/bin/bash
# Session 41, call 3: the compile threshold checked at 4,500 frames. ONE_CLIP_COMPILE_MIN_FRAMES is
# raised to 5,000 in this tree (call 2: at 1,500 frames the eager render won by 2.4-3.8 s), so the
# CLI variant (cli) renders a 180-s clip eagerly; foreground compiles it. Each with its own caches:
# first ever, then two new processes with warm caches.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout $((585 - $(date +%s) + START)) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips 180s --warmups cli foreground \
  --repeats 2 --out $OUT/ttv_180s.json > $OUT/ttv_180s.log 2>&1
echo "ttv rc $? s $(( $(date +%s) - START ))"
tail -40 $OUT/ttv_180s.log
