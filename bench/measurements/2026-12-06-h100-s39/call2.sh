#!/bin/bash
# Session 39, call 2 (a fresh machine, 457 s of device time left): green_contention_probe.py, the
# real LMDM window (12 streams) beside the real render (40-frame batches) on ordinary streams and
# on disjoint SMs (green contexts). Wheels only (no bytecode compile: every second counts here).
set -u
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -d /tmp/site/av ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
S=$SECONDS
PYTHONPATH=$PWD:/tmp/site timeout 280 python3 bench/measurements/2026-12-06-h100-s39/green_contention_probe.py \
  > $OUT/green_contention.log 2> $OUT/green_contention.err
echo "probe rc $? s $((SECONDS-S))"; tail -1 $OUT/green_contention.log; grep -v Warning $OUT/green_contention.err | tail -3 | cut -c1-300
