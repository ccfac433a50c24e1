#!/bin/bash
# Prepared in session 29 for the next device session (not yet run; .carry/primed_shapes.patch:
# git show s29-primed-shapes -- ditto_core > .carry/primed_shapes.patch). Run from main with carry
# [".whl", ".carry"]. Branch s29-primed-shapes = .carry/primed_shapes.patch (an eager batch computes
# only the two sizes the priming ran: a clip's last stretch shorter than a batch in first-batch
# pieces, the last padded).
# 1. The branch's GPU tests (warp+decode).
# 2. second_clip_probe.py on main and on the branch (one Inductor cache): clip 1's last batch (call 1:
#    0.97 s for 6 frames against 0.03 for the first 4-frame one) and clip 2's last piece (0.19 s
#    against 0.016 in clip 3: cuDNN plans for a new size) should both fall to about 0.03 s.
# 3. A real ComfyUI, main beside the branch, two relaunches each: the new process's render (main
#    2.2-2.5 s on an H100, 14 eager batches, the last a new size).
# Then plan_next_trim.sh (the idle trim, main against main without it) and
# ../2026-12-05-h100-s28/plan_next_live.sh.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
d=/tmp/pieces; rm -rf $d && mkdir $d && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $d
patch -s -p1 -d $d < .carry/primed_shapes.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
(cd $d && timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_warp_decode.py) > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; tail -2 $OUT/gpu_tests.log
P=$PWD/bench/measurements/2026-12-05-h100-s28/second_clip_probe.py
for v in main:$PWD pieces:$d; do
  (cd ${v#*:} && PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync TORCHINDUCTOR_CACHE_DIR=/tmp/ind_probe PYTHONPATH=$PWD:$PYTHONPATH \
    timeout 150 python3 $P /tmp/models $OUT/second_clip_${v%%:*}.json 2>&1 | tail -4 | cut -c1-300 | sed "s/^/${v%%:*} /")
done
echo "probes s $SECONDS"
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 200 ] || exit 0
timeout $LEFT python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 --models /tmp/models --hubert $H \
  --pack main=. --pack pieces=$d --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 \
  --idle-before-warm 10 --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1; echo "bench rc $? s $SECONDS"
grep -E "^(main|pieces|log|goal)" $OUT/comfyui.log
