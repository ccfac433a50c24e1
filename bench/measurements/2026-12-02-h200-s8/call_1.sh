#!/bin/bash
# Device call 1 (session 8): measure the current code: x264 feeding costs, the writer under py-spy,
# the live GPU tests, a profiled new process (CLI warm-up policy).
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; nproc; lscpu | grep -E "Model name|Thread|Core|Socket|MHz" ; SECONDS=0
timeout 110 python3 .carry/x264_probe.py $OUT/x264_probe_1.json 2>&1 | tail -45
echo "probe s $SECONDS"; SECONDS=0
timeout 110 py-spy record --threads --native --idle -r 200 -f raw -o $OUT/pyspy_delivered_1.txt -- python3 -m bench.bench_delivered --presets ultrafast superfast --encoders 2 --out $OUT/delivered_1.json 2>&1 | grep -vE "^\s*$" | tail -16
[ -f $OUT/delivered_1.json ] || timeout 90 python3 -m bench.bench_delivered --presets ultrafast superfast --encoders 2 --out $OUT/delivered_1.json 2>&1 | tail -16
echo "delivered s $SECONDS"; SECONDS=0
timeout 110 python3 -m pytest -m gpu -q -s tests/test_live_gpu.py -p no:cacheprovider 2>&1 | tail -25
echo "live tests s $SECONDS"; SECONDS=0
timeout 140 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 100 --clips example --warmups cli --profile --profile-dir $OUT/prof --out $OUT/ttv_1.json 2>&1 | tail -14
echo "ttv s $SECONDS"
