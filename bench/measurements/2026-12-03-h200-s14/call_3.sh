#!/bin/bash
# Device call 3 (session 14): call 2's illegal memory access, one variant per process
# (live_crash_probe.py); the first compiles, the rest load the compile cache.
set -u
. .carry/preamble.sh
for v in as-is no-hubert-graphs no-lmdm-graphs old-capture; do
  SECONDS=0
  PYTHONPATH=$PWD:$PYTHONPATH timeout 200 python3 .carry/live_crash_probe.py $v > $OUT/probe_$v.log 2>&1; echo "$v rc $? s $SECONDS"
  grep -E "^$v |Error: |illegal" $OUT/probe_$v.log | head -5 | cut -c1-250
done
SECONDS=0
PYTHONPATH=$PWD:$PYTHONPATH CUDA_LAUNCH_BLOCKING=1 timeout 150 python3 .carry/live_crash_probe.py as-is > $OUT/probe_blocking.log 2>&1; echo "blocking rc $? s $SECONDS"
grep -E "^as-is |Error: |illegal|File \"/work" $OUT/probe_blocking.log | head -24 | cut -c1-250
