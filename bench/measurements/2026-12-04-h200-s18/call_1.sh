#!/bin/bash
# Device call 1 (session 18): delivered frames/s with the MP4 sent to the disk as it grows and the
# heap trimmed off the caller's thread, against each left out and both (before), tails broken
# down; time to video with the face models loaded at a registration's cache miss against loaded
# with the pipeline (before), three new processes of each in turn, then one more child of each
# sampled by py-spy (every thread); the GPU tests of what changed.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s18/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 240 python3 -m bench.bench_delivered --presets ultrafast --layouts 1 1e 1t 1et --frames 400 --cache-dir /tmp/ind --out $OUT/delivered_1.json > $OUT/delivered_1.log 2>&1; echo "delivered rc $?"; grep -E "GPU side|ultrafast:|Error" $OUT/delivered_1.log | cut -c1-700
python3 -c "
import json; d=json.load(open('$OUT/delivered_1.json'))
for k, v in d['presets']['ultrafast']['layouts'].items(): print(k, [round(r, 1) for r in v['runs']], [round(t, 3) for t in v['tail_s']], v['finish_s'])" 2>&1 | tail -4 | cut -c1-600
echo "delivered s $SECONDS"; SECONDS=0
LEFT=$((300 - $(date +%s) + START)); [ $LEFT -gt 40 ] && { timeout $LEFT python3 -m bench.bench_delivered --presets ultrafast --layouts 1 1et --frames 1500 --cache-dir /tmp/ind --out $OUT/delivered_1_long.json > $OUT/delivered_1_long.log 2>&1; echo "delivered long rc $?"; grep -E "GPU side|ultrafast:|Error" $OUT/delivered_1_long.log | cut -c1-700; echo "delivered long s $SECONDS"; SECONDS=0; }
mkdir -p $OUT/profiles
LEFT=$((500 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli cli-eagerfaces --repeats 3 --profile --py-spy /tmp/site/bin/py-spy --profile-dir $OUT/profiles --out $OUT/ttv_1.json > $OUT/ttv_1.log 2>&1; echo "ttv rc $?"; grep -vE "Warning|warn" $OUT/ttv_1.log | grep -E "^example|goal|Error" | cut -c1-330
python3 - <<'PY' 2>&1 | tail -12
import json, os
d = json.load(open(os.environ["OUT"] + "/ttv_1.json"))
for name, clip in d["clips"].items():
    for state in ("new_process", "warm_process"):
        item = clip.get(state) or {}
        print(name, state, round(item.get("wall_s", 0), 2), item.get("all_wall_s"), {k: round(v, 2) for k, v in (item.get("stages_s") or {}).items()},
              {k: round(v, 2) for k, v in (item.get("process") or {}).items() if k.endswith("_s") and isinstance(v, float)})
PY
for f in $OUT/profiles/*.speedscope.json; do [ -f "$f" ] && python3 -m bench.profile_timeline "$f" --slice 0.25 --top 8 > "${f%.speedscope.json}.timeline.txt" 2>&1; done
ls -la $OUT/profiles | head; head -30 $OUT/profiles/example_cli_profiled.timeline.txt 2>/dev/null | cut -c1-200
echo "ttv s $SECONDS"; SECONDS=0
LEFT=$((585 - $(date +%s) + START)); [ $LEFT -gt 40 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short --timeout 200 tests/test_video_writer.py tests/test_video_segments.py tests/test_video_colour.py tests/test_live_hubert_windows.py tests/test_registration_end_to_end.py tests/test_hardening_models.py > $OUT/gpu_tests_1.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|^FAILED" $OUT/gpu_tests_1.log | head -20 | cut -c1-300
echo "tests s $SECONDS"
