#!/bin/bash
# Session 39, call 1 (a fresh machine; two refusals had left no device time for a second call):
# 0. library_load_probe.py: how much of a new process's first cuDNN / cuBLAS call is dlopen;
# 1. live at 25 and 10 DDIM steps side by side in one process (bench_live --steps 25 10: the
#    runtime warmed up for both, as `serve --steps 25 10`), JPEG, 8 / 10 / 12 streams, every level;
# 2. session 38's pinned_to_host.patch (a live pass's encoded frames copied to page-locked memory)
#    in a copy of the tree: its copy probe, bench_live JPEG 8 / 10 / 12 at 25 steps (caches warm
#    from 1), then its GPU test and the live GPU tests with what time is left.
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
HERE=$PWD
D=bench/measurements/2026-12-06-h100-s39
PATCH=$HERE/bench/measurements/2026-12-06-h100-s38/pinned_to_host.patch
left() { echo $(($1 - $(date +%s) + START)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/after && cp -r $HERE /tmp/after && (cd /tmp/after && git apply "$PATCH") || { echo "patch failed"; exit 1; }
echo "preamble s $(( $(date +%s) - START ))"
timeout 60 python3 $D/library_load_probe.py 2>&1 | tail -3
timeout $(left 455) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 \
  --parts concurrency --streams 8 10 12 --steps 25 10 --out $OUT/live_steps.json > $OUT/live_steps.log 2>&1
echo "steps rc $? s $(( $(date +%s) - START ))"
python3 $D/summarise_live.py steps=$OUT/live_steps.json
cd /tmp/after
PYTHONPATH=$PWD:$PYTHONPATH timeout 40 python3 bench/measurements/2026-12-06-h100-s38/pinned_copy_probe.py 2>&1 | tail -2
if [ $(left 560) -gt 80 ]; then
  timeout $(left 560) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --parts concurrency \
    --streams 8 10 12 --out $OUT/live_pinned.json > $OUT/live_pinned.log 2>&1
  echo "pinned rc $? s $(( $(date +%s) - START ))"
  python3 $HERE/$D/summarise_live.py pinned=$OUT/live_pinned.json
fi
if [ $(left 595) -gt 20 ]; then
  timeout $(left 595) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_live_render.py \
    tests/test_live_gpu.py > $OUT/gpu_tests.log 2>&1
  echo "gpu tests rc $? s $(( $(date +%s) - START ))"; tail -6 $OUT/gpu_tests.log | cut -c1-250
fi
