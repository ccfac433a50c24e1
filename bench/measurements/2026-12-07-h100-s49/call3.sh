#!/bin/bash
# Session 49, call 3 (about 480 s): the CLI's new process with the start-up's objects frozen once
# the models are loaded (gc_pauses.freeze_for_the_process) against it without (cli-nofreeze), four
# children each, in turn, real-architecture HuBERT, the example; then, with the time left, the
# ComfyUI-like process (foreground: compiled at its first batch) for its warm job.
# Run from the tree with the change: END=480 bash bench/measurements/2026-12-07-h100-s49/call3.sh (carry as call 1).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-480}
O=/tmp/o3; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call3.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1
stamp "hubert" $?
ttv() {  # name variants...
  timeout $(( $(left) - 15 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
    --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups "${@:2}" --repeats 4 \
    --out $O/ttv_$1.json > $O/ttv_$1.log 2>&1
  stamp "ttv $1" $?; grep -E "^example/" $O/ttv_$1.log | cut -c1-420; pack
}
ttv freeze cli cli-nofreeze
python3 - $O/ttv_freeze.json <<'PY'
import json, sys
clips = json.load(open(sys.argv[1]))["clips"]
for name, states in clips.items():
    state = states.get("new_process", {})
    print(name, "walls", [round(x, 2) for x in state.get("all_wall_s", [])], "gc full s", state.get("all_gc_full_s"),
          "frozen", state.get("process", {}).get("frozen_objects"))
PY
[ $(left) -gt 150 ] && ttv comfy foreground
pack
