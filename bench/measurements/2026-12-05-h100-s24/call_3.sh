#!/bin/bash
# Device call 3 (session 24): background warm-up, main against branch s20-background-graphs (its diff
# applied as .carry/bg.patch for the variant "branch"), two new processes each.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
for variant in main branch; do
  LEFT=$((560 - $(date +%s) + START)); [ $LEFT -gt 60 ] || break
  [ $variant = branch ] && patch -s -p1 < .carry/bg.patch
  timeout $LEFT python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 120 --clips example --warmups background --repeats 2 --out $OUT/ttv_bg_$variant.json > $OUT/ttv_bg_$variant.log 2>&1; echo "$variant rc $?"
  [ $variant = branch ] && patch -s -R -p1 < .carry/bg.patch
  grep -E "^example" $OUT/ttv_bg_$variant.log | cut -c1-300
done
echo "ttv s $SECONDS"; SECONDS=0
