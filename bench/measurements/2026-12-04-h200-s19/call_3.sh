#!/bin/bash
# Device call 3 (session 19), issue 15: the engine's two warm-ups side by side in today's code,
# for ComfyUI's choice and the worker's: foreground (ComfyUI's default: compile with CUDA graphs
# at the first full batch) against background (the worker's: a compile thread from model load,
# eager until ready, no CUDA graphs), each first ever, new process, warm process.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
LEFT=$((285 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 100 --clips example --warmups foreground background --repeats 2 --out $OUT/ttv_3.json > $OUT/ttv_3.log 2>&1; echo "ttv rc $?"
grep -E "^example|^goal" $OUT/ttv_3.log | cut -c1-420
python3 -c "
import json; d=json.load(open('$OUT/ttv_3.json'))
for k,v in d['clips'].items():
  for s,x in v.items(): print(k, s, round(x['wall_s'],2) if 'wall_s' in x else x.get('error'), x.get('all_wall_s'), (x.get('engine') or {}).get('compile_seconds'))" 2>&1 | tail -8
echo "ttv s $SECONDS"
