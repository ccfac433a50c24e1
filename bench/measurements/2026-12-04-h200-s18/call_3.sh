#!/bin/bash
# Device call 3 (session 18): the 30-minute memory run again after HuBERT was held to two LMDM
# windows ahead of a stream (call 2: CUDA's reserved memory grew 15.9 -> 19.9 GiB over the first
# 15 minutes while features of the speech pushed at once piled up). 10 steps (memory does not
# depend on the step count; the run is shorter); then the live GPU tests.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s18/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
LEFT=$((480 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_live --hubert $H --streams 1 --steps 10 --parts first_frame long_stream --minutes 30 --out $OUT/live_3.json > $OUT/live_3.log 2>&1; echo "live rc $?"
grep -E "setup_s|first_frame|long_stream|Error" $OUT/live_3.log | cut -c1-600
python3 -c "
import json; d=json.load(open('$OUT/live_3.json')); l=d.get('long_stream') or {}
print('finished', l.get('finished'), 'frames', l.get('frames'), 'wall', l.get('wall_s'), 'drift', l.get('drift_after_first_quarter'))
s=l.get('samples') or []
for x in s[:2]+s[len(s)//4:len(s)//4+1]+s[len(s)//2:len(s)//2+1]+s[-2:]: print(x)" 2>&1 | tail -8
echo "live s $SECONDS"; SECONDS=0
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 40 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -x tests/test_live_gpu.py tests/test_live_stitch.py > $OUT/live_gpu_tests_3.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error" $OUT/live_gpu_tests_3.log | head -12 | cut -c1-400
echo "tests s $SECONDS"
