#!/bin/bash
# Session 30, call 3. Carry [".whl", ".carry"] (.carry/shared/reference/cases/warp_network.pt
# added: the warp+decode GPU tests read it).
# 1. Branch s29-primed-shapes' GPU tests (call 1 ran them without the reference case: 3 failed
#    on the missing file).
# 2. ComfyUI with the stall tracer (bench/stall_trace.py, --trace-stalls): main beside "late"
#    (.carry/late_compile.patch: the deferred compile starts 1 s after the clip's last batch
#    instead of at once), two relaunches, one warm round. Calls 1-2 of this session: every new
#    process's first prompt spent 0.23-0.25 s between the node's "executed" message and
#    "execution_success" (ComfyUI's executor does next to nothing there); the tracer names what
#    held the interpreter then.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
d=/tmp/pieces; rm -rf $d && mkdir $d && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $d
patch -s -p1 -d $d < .carry/primed_shapes.patch || exit 1
l=/tmp/late; rm -rf $l && mkdir $l && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $l
patch -s -p1 -d $l < .carry/late_compile.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
(cd $d && timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_warp_decode.py) > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; tail -2 $OUT/gpu_tests.log
timeout $((590 - $(date +%s) + START)) python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. --pack late=$l --trace-stalls \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(main|late|log|goal)" $OUT/comfyui.log | cut -c1-2500
