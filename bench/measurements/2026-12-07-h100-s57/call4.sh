#!/bin/bash
# Session 57, call 4 (the device time left, about 150 s): the CLI's new process with the first batch's
# priming (now the default) against the full one, two children each in turn.
# Run from main: END=140 bash bench/measurements/2026-12-07-h100-s57/call4.sh
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1; stamp hubert $?
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
timeout $(( $(left) - 5 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-primefull \
  --repeats 2 --out $OUT/ttv_h200.json > $O/ttv.log 2>&1
stamp "ttv cli against cli-primefull" $?; grep -E "^example/" $O/ttv.log | cut -c1-480
