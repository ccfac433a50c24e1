#!/bin/bash
# Prepared in session 24 for the next device session (not yet run): torch.compile's ahead-of-time
# path for the warp+decode step. Before the call, here:
#   git diff main s24-precompiled-step -- ditto_core nodes tests docs > .carry/pre.patch
# 1. precompile_probe.py: compile and save in one process, load in fresh ones (does torch 2.11 load
#    it on CUDA, what a new process pays, ms/frame from the captured graph against eager);
# 2. with the branch applied, time to video: cli and foreground (code paths the branch does not
#    touch: the baselines) beside aot (the CLI's --aot, now a precompiled package built after the
#    first MP4), three new processes each in turn.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
P=bench/measurements/2026-12-05-h100-s24/precompile_probe.py
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pre timeout 200 python3 $P save > $OUT/precompile_save.log 2>&1; echo "save rc $?"
grep RESULT $OUT/precompile_save.log | cut -c1-600; tail -2 $OUT/precompile_save.log | cut -c1-300
for i in 1 2; do
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pre timeout 90 python3 $P load > $OUT/precompile_load_$i.log 2>&1; echo "load $i rc $?"
  grep RESULT $OUT/precompile_load_$i.log | cut -c1-900; tail -2 $OUT/precompile_load_$i.log | cut -c1-300
done
echo "probe s $SECONDS"; SECONDS=0
grep -q '"rel_l2"' $OUT/precompile_load_1.log || exit 0  # it does not load: nothing to time
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 120 ] || exit 0
patch -s -p1 < .carry/pre.patch
timeout $LEFT python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 150 --clips example --warmups cli aot foreground --repeats 3 --out $OUT/ttv_precompiled.json > $OUT/ttv_precompiled.log 2>&1; echo "ttv rc $?"
patch -s -R -p1 < .carry/pre.patch
grep -E "^example" $OUT/ttv_precompiled.log | cut -c1-400
