#!/bin/bash
# Device call 2 (session 18): the 30-minute memory run of issue 17: one stream of 30 minutes of
# speech pushed as fast as it is animated (25 steps, real-architecture HuBERT), host RSS and CUDA
# memory sampled every 10 s of stream and written as they are taken; the runtime made for one
# stream, so the warm-up records one LMDM batch size. Then the live GPU tests with the time left.
set -u
START=$(date +%s); T0=$SECONDS
# Call 1's py-spy files, if this is its machine (its $OUT could bring back only eight files).
P=$(find / -xdev -name example_cli_profiled.speedscope.json -not -path "$OUT/*" 2>/dev/null | head -1)
[ -n "$P" ] && tar czf $OUT/profiles_1.tgz -C "$(dirname "$P")" . && echo "call 1 profiles kept"
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s18/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
LEFT=$((560 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_live --hubert $H --streams 1 --parts first_frame long_stream --minutes 30 --out $OUT/live_2.json > $OUT/live_2.log 2>&1; echo "live rc $?"
grep -E "setup_s|first_frame|long_stream|Error" $OUT/live_2.log | cut -c1-600
python3 -c "
import json; d=json.load(open('$OUT/live_2.json')); l=d.get('long_stream') or {}
print('finished', l.get('finished'), 'frames', l.get('frames'), 'wall', l.get('wall_s'), 'drift', l.get('drift_after_first_quarter'))
s=l.get('samples') or []
for x in s[:2]+s[len(s)//4:len(s)//4+1]+s[-2:]: print(x)" 2>&1 | tail -8
echo "live s $SECONDS"; SECONDS=0
LEFT=$((588 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -x tests/test_live_gpu.py tests/test_live_stitch.py > $OUT/live_gpu_tests_2.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error" $OUT/live_gpu_tests_2.log | head -12 | cut -c1-400
echo "tests s $SECONDS"
