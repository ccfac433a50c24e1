#!/bin/bash
# The next call (session 57 had too little device time left to start it): on an H200, the goals' GPU,
# the CLI's new process with the first batch's priming (the default since session 57) against the full
# one, five children each in turn.
# Run from main: END=330 bash bench/measurements/2026-12-07-h100-s57/plan_next.sh
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1; stamp hubert $?
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
timeout $(( $(left) - 5 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-primefull \
  --repeats 5 --out $OUT/ttv_h200.json > $O/ttv.log 2>&1
stamp "ttv cli against cli-primefull" $?; grep -E "^example/" $O/ttv.log | cut -c1-480
