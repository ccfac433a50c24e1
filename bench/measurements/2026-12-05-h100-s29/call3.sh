#!/bin/bash
# Session 29, call 3: main beside noprime again (.carry/no_prime.patch: no eager priming at model
# load; call 2 had one launch each way 4.69 / 5.83 s against 5.63 / 5.81 s), two relaunches each,
# and where the node's span goes beyond its timer: the timer's start among ComfyUI's messages
# (node_edges) and the allocator's reserved memory at the start (ComfyUI empties the cache after
# an idle prompt). The call has about 450 s of device time left. Carry [".whl", ".carry"].
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
d=/tmp/noprime; rm -rf $d && mkdir $d && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $d
patch -s -p1 -d $d < .carry/no_prime.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
LEFT=$((420 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 --models /tmp/models --hubert $H \
  --pack main=. --pack noprime=/tmp/noprime --image $E/portrait.jpg --audio $E/speech_24k_mono.wav \
  --repeats 2 --warm-rounds 1 --idle-before-warm 10 --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1
echo "bench rc $? s $SECONDS"
grep -E "^(main|noprime|log|goal)" $OUT/comfyui.log
