#!/bin/bash
# Device call 6 (session 24): torch.compile's ahead-of-time path for warp+decode (precompile_probe.py):
# compile and save in one process, load in two fresh ones (the second finds Inductor's caches warm too).
set -u
T0=$SECONDS
NEED_HUBERT=0 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
P=bench/measurements/2026-12-05-h100-s24/precompile_probe.py
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pre
timeout 200 python3 $P save > $OUT/precompile_save.log 2>&1; echo "save rc $? s $SECONDS"; grep RESULT $OUT/precompile_save.log | cut -c1-600; tail -3 $OUT/precompile_save.log | cut -c1-400
for i in 1 2; do
  timeout 90 python3 $P load > $OUT/precompile_load_$i.log 2>&1; echo "load $i rc $?"; grep RESULT $OUT/precompile_load_$i.log | cut -c1-900; tail -3 $OUT/precompile_load_$i.log | cut -c1-400
done
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pre_empty timeout 90 python3 $P load > $OUT/precompile_load_emptycache.log 2>&1; echo "load (empty Inductor cache) rc $?"; grep RESULT $OUT/precompile_load_emptycache.log | cut -c1-900
