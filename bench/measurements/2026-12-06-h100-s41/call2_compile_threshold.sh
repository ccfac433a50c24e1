#!/bin/bash
# Session 41, call 2 (on call 1's warm machine): is ONE_CLIP_COMPILE_MIN_FRAMES (2,500 frames, set
# before the decoder's eager kernels made the eager render faster) still where a one-clip process's
# compile starts to pay? The CLI's own variant (cli: eager below the threshold) against compiling every
# clip (foreground), the example (394 frames) and a 60-s clip (1,500 frames), each variant with its own
# caches: first ever, then new processes with warm caches (two children of two jobs each).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout $((585 - $(date +%s) + START)) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example 60s --warmups cli foreground \
  --repeats 2 --out $OUT/ttv_threshold.json > $OUT/ttv_threshold.log 2>&1
echo "ttv rc $? s $(( $(date +%s) - START ))"
tail -40 $OUT/ttv_threshold.log
