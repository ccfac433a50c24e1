#!/bin/bash
# Session 38, call 2: where the GPU's time goes with 12, 8 and 1 live streams (JPEG, 25 steps,
# HuBERT-large): bench_live's profile part, each trace summarised by bench/kernel_timeline.py.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout 480 python3 -m bench.bench_live --hubert $H --parts profile --profile /tmp/prof --profile-streams 12 8 1 \
  --out $OUT/profile.json > $OUT/profile.log 2>&1
echo "profile rc $? s $(( $(date +%s) - START ))"; grep -E "Error|setup_s" $OUT/profile.log | cut -c1-300 | tail -3
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/profile.json"))
print("render_batch_ms", d.get("render_batch_ms"))
for n, p in d.get("profile", {}).items():
    g = p["gpu"]
    print(f"== {n} streams: p50 {p['chunk_latency_p50_ms']:.1f} p95 {p['chunk_latency_p95_ms']:.1f} window {g.get('window_ms')} "
          f"busy {g.get('kernel_busy_share')} copy_ms {g.get('copy_ms')} gaps {g.get('idle_gaps')}")
    for sid, s in g.get("streams", {}).items():
        print(f"  stream {sid}: kernels {s['kernels']} ms {s['kernel_ms']} beside {s['beside_other_streams_ms']}")
        for k in s["busiest"]:
            print(f"    {k['ms']:9.1f} ms {k['count']:6d}x {k['name'][:100]}")
PY
echo "end s $(( $(date +%s) - START ))"
