#!/bin/bash
# Session 40, call 1 (a fresh machine; refusals had left time for one full call):
# 1. session 39's green-context recording probes: PyTorch's own API (green_record_probe.py) and
#    the driver API with the _v2 context calls and a Triton kernel (green_capture_probe.py);
# 2. bench_live at the LMDM overlaps 75 and 70 side by side in one process, 12 streams, JPEG,
#    25 steps (the chunk latency counted from the speech behind each window's newest row);
# 3. the live GPU tests (session 39's warm-up mend, bd5df17, not yet run on a GPU);
# 4. with what is left: green_render_probe.py (the real render compiled and recorded inside the
#    116-SM partition, the LMDM window beside it).
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
S39=bench/measurements/2026-12-06-h100-s39
left() { echo $(($1 - $(date +%s) + START)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout 60 python3 $S39/green_record_probe.py > $OUT/green_record.log 2>&1; tail -1 $OUT/green_record.log | cut -c1-1200
timeout 60 python3 $S39/green_capture_probe.py > $OUT/green_capture.log 2>&1; tail -1 $OUT/green_capture.log | cut -c1-1200
echo "probes s $(( $(date +%s) - START ))"
timeout $(left 400) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 \
  --parts concurrency --streams 12 --overlap 75 70 --out $OUT/live_overlap.json > $OUT/live_overlap.log 2>&1
echo "overlap rc $? s $(( $(date +%s) - START ))"
python3 $S39/summarise_live.py overlap=$OUT/live_overlap.json
timeout $(left 540) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_live_render.py \
  tests/test_live_gpu.py > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $(( $(date +%s) - START ))"; tail -4 $OUT/gpu_tests.log | cut -c1-250
if [ $(left 595) -gt 60 ]; then
  PYTHONPATH=$PWD:$PYTHONPATH timeout $(left 595) python3 $S39/green_render_probe.py > $OUT/green_render.log 2> $OUT/green_render.err
  echo "render probe rc $? s $(( $(date +%s) - START ))"; tail -1 $OUT/green_render.log | cut -c1-1500
fi
