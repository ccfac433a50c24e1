#!/bin/bash
# Prepared in session 23 for the next device session (not yet run). Branch s20-background-graphs
# against main, side by side in one call on main's tree: before the call, here,
#   git diff main s20-background-graphs -- ditto_core nodes tests > .carry/bg.patch
# and the variant "branch" applies it for its run. Session 23's call 1 got one child of each
# before its limit (ttv_1.json): background first ever 33.9 s, new process 16.5 s, warm 5.4 s,
# against foreground 66.1 / 11.3 / 1.55 s; this measures background with and without the recorded
# graph, then delivered frames/s (issue 16), whose empty-cache compile needs about 150 s.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
for variant in main branch; do
  LEFT=$((330 - $(date +%s) + START)); [ $LEFT -gt 60 ] || break
  [ $variant = branch ] && patch -s -p1 < .carry/bg.patch
  timeout $LEFT python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups background --repeats 2 --out $OUT/ttv_bg_$variant.json > $OUT/ttv_bg_$variant.log 2>&1; echo "$variant rc $?"
  [ $variant = branch ] && patch -s -R -p1 < .carry/bg.patch
  grep -E "^example" $OUT/ttv_bg_$variant.log | cut -c1-300
done
echo "ttv s $SECONDS"; SECONDS=0
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m bench.bench_delivered --presets ultrafast --layouts 1 --frames 1500 --cache-dir /tmp/ind --out $OUT/delivered.json > $OUT/delivered.log 2>&1; echo "delivered rc $?"
grep -E "GPU side|ultrafast:|Error" $OUT/delivered.log | cut -c1-700
