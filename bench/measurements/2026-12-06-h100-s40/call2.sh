#!/bin/bash
# Session 40, call 2 (on call 1's machine while it is warm, else a fresh one):
# 1. bench_live at the LMDM overlaps 75 and 70 side by side in one process (a window every 5
#    frames, Ditto's online setting, against every 10: half the LMDM's windows), JPEG, 25 steps,
#    10 and 12 streams, every level; the chunk latency counted, since this session's fix, from the
#    speech behind the newest feature row each window read, whatever the overlap;
# 2. the live GPU tests (session 39's warm-up mend, bd5df17, has not run on a GPU).
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
D=bench/measurements/2026-12-06-h100-s40
left() { echo $(($1 - $(date +%s) + START)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout $(left 420) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 \
  --parts concurrency --streams 10 12 --overlap 75 70 --out $OUT/live_overlap.json > $OUT/live_overlap.log 2>&1
echo "overlap rc $? s $(( $(date +%s) - START ))"
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py overlap=$OUT/live_overlap.json
timeout $(left 595) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_live_render.py \
  tests/test_live_gpu.py > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $(( $(date +%s) - START ))"; tail -6 $OUT/gpu_tests.log | cut -c1-250
