#!/bin/bash
# Prepared in session 29 for the next device session (not yet run), call 1 of 3 (then
# plan_next_comfyui.sh, then ../2026-12-05-h100-s28/plan_next_live.sh). Run from main, carry
# [".whl", ".carry"]; .carry/primed_shapes.patch is branch s29-primed-shapes
# (git show s29-primed-shapes -- ditto_core > .carry/primed_shapes.patch): an eager batch computes
# only the two sizes the priming ran (a clip's last stretch shorter than a batch in first-batch
# pieces, the last padded).
# 1. The branch's GPU tests (warp+decode).
# 2. second_clip_probe.py on main and on the branch (one Inductor cache): clip 1's last batch (session
#    29: 0.97 s for 6 frames against 0.03 s for the first 4-frame one) and clip 2's last piece
#    (0.19 s against 0.016 s in clip 3: cuDNN plans for a new size) should both fall to about 0.03 s.
set -u
T0=$SECONDS
NEED_HUBERT=0 . bench/measurements/2026-12-04-h200-s19/preamble.sh
d=/tmp/pieces; rm -rf $d && mkdir $d && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $d
patch -s -p1 -d $d < .carry/primed_shapes.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
(cd $d && timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_warp_decode.py) > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; tail -2 $OUT/gpu_tests.log
P=$PWD/bench/measurements/2026-12-05-h100-s28/second_clip_probe.py
for v in main:$PWD pieces:$d; do
  (cd ${v#*:} && PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync TORCHINDUCTOR_CACHE_DIR=/tmp/ind_probe PYTHONPATH=$PWD:$PYTHONPATH \
    timeout 180 python3 $P /tmp/models $OUT/second_clip_${v%%:*}.json 2>&1 | tail -4 | cut -c1-300 | sed "s/^/${v%%:*} /")
  echo "probe ${v%%:*} done s $SECONDS"
done
