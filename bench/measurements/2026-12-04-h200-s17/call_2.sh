#!/bin/bash
# Device call 2 (session 17): time to video with HuBERT primed while the models load against not
# (both with x264 opened by the writer's thread), and with the motion ahead of the render, three
# new processes of each in turn; delivered frames/s with the clip's last stretch rendered eagerly
# in pieces (call 1 measured it before); the GPU tests of what changed.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s17/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 300 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli cli-nohubertprime cli-ahead --repeats 3 --out $OUT/ttv_2.json > $OUT/ttv_2.log 2>&1; echo "ttv rc $?"; grep -vE "Warning|warn" $OUT/ttv_2.log | grep -E "^example|goal|Error" | cut -c1-330
python3 - <<'PY' 2>&1 | tail -12
import json, os
d = json.load(open(os.environ["OUT"] + "/ttv_2.json"))
for name, clip in d["clips"].items():
    for state in ("new_process", "warm_process"):
        item = clip.get(state) or {}
        print(name, state, round(item.get("wall_s", 0), 2), item.get("all_wall_s"), {k: round(v, 2) for k, v in (item.get("stages_s") or {}).items()},
              {k: round(v, 2) for k, v in (item.get("process") or {}).items() if k.endswith("_s") and isinstance(v, float)})
PY
echo "ttv s $SECONDS"; SECONDS=0
LEFT=$((430 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m bench.bench_delivered --presets ultrafast --layouts 1 --frames 400 --cache-dir /tmp/ind --out $OUT/delivered_2.json > $OUT/delivered_2.log 2>&1; echo "delivered rc $?"; grep -E "GPU side|ultrafast:|Error" $OUT/delivered_2.log | cut -c1-700
echo "delivered s $SECONDS"; SECONDS=0
LEFT=$((570 - $(date +%s) + START)); [ $LEFT -gt 40 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short --timeout 200 tests/test_hubert_torch.py tests/test_warp_decode.py tests/test_video_writer.py > $OUT/gpu_tests_2.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|^FAILED" $OUT/gpu_tests_2.log | head -20 | cut -c1-300
echo "tests s $SECONDS"
