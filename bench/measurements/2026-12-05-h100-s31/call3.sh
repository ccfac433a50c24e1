#!/bin/bash
# Session 31, call 3 (call 2 as written was refused eleven times, and the device time left holds one
# pack): the "saved" pack alone (main + .carry/saved_steps.patch, branch s31-saved-step) in a real
# ComfyUI with the stall tracer: the first prompt ever (its compile after the prompt is saved), then
# relaunches whose first prompt should load the saved step as the models load and switch to
# compiled batches. Judged within each launch: the new process's first prompt against the same
# launch's later prompts (the goal: at most 2 s more), and the engine's records (graph batches,
# aot_seconds). LIMIT: seconds from the start for the benchmark to end. Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
s=/tmp/saved; rm -rf $s && mkdir $s && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $s
patch -s -p1 -d $s < .carry/saved_steps.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout $((${LIMIT:-400} - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack saved=$s --trace-stalls \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 60 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(saved|log|goal)" $OUT/comfyui.log | cut -c1-1200
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/comfyui.json"))
for pack, launches in d.get("launches", {}).items():
    for i, launch in enumerate(launches):
        for p in launch.get("prompts", launch if isinstance(launch, list) else []):
            r = (p.get("node_records") or {}).get("4:DittoTalkingHead", {})
            e = r.get("engine", {})
            print(pack, i, round(p.get("wall_s", -1), 2), {k: e.get(k) for k in ("eager_batches", "graph_batches", "aot_seconds", "aot_built", "compile_seconds")})
for pack, text in d.get("log_tails", {}).items():
    for line in text.splitlines():
        if "warp+decode" in line or "AOT package" in line:
            print("log", pack, line[:300])
PY
