#!/bin/bash
# Session 50, call 3 (about 420 s, fresh machine): the LMDM window recorded as its prologue and one
# step (graph_span="step", the CLI's one clip) against the whole window:
# 1. the GPU tests of the sampler (both spans: equal windows bit for bit, compiled, grad modes,
#    cudaMallocAsync) while the HuBERT-large is written;
# 2. bench_lmdm at 25 steps, batch 1, no compiled variants: each span's recording (first call, in a
#    warm process) and replay per window;
# 3. bench_time_to_video, the CLI with the step graph (cli) against the whole window's (cli-windowgraph),
#    four new processes each in turn, the example, real-architecture HuBERT.
# Run from main: END=420 bash bench/measurements/2026-12-07-h100-s50/call3.sh (carry as call 1)
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-420}
O=/tmp/o3; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call3.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp "preamble" 0
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUB=$!
timeout 200 python3 -m pytest -q -m gpu -p no:randomly -p no:cacheprovider tests/test_lmdm_sampler.py tests/test_lmdm.py \
  > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; tail -4 $O/gpu_tests.log; grep -E "^(FAILED|ERROR)" $O/gpu_tests.log | head; pack
wait $HUB; stamp "hubert" $?
timeout 90 python3 -m bench.bench_lmdm --steps 25 --compile --reps 20 --out $O/lmdm.json > $O/lmdm.log 2>&1
stamp "bench_lmdm" $?
python3 - $O/lmdm.json <<'PY'
import json, sys
row = json.load(open(sys.argv[1]))["per_window"]["25"]
for name, v in row.items():
    if isinstance(v, dict) and "median_ms" in v:
        print(name, "median", round(v["median_ms"], 3), "first", round(v.get("first_call_ms", 0), 1), "rel", v.get("rel_l2_vs_fp32"))
PY
pack
timeout $(( $(left) - 10 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-windowgraph --repeats 4 \
  --out $O/ttv.json > $O/ttv.log 2>&1
stamp "ttv" $?; grep -E "^example/|goal" $O/ttv.log | cut -c1-430
pack
