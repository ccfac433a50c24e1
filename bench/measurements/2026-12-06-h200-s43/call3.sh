#!/bin/bash
# Session 43, call 3 (about 400 s on one GPU), after call 1 showed the LMDM window recorded on the
# priming thread aborting new processes (the stage timer's device synchronize during the recording):
# 1. the GPU tests of the primings (the LMDM's now eager on its thread, HuBERT's) and Triton's key,
#    while the HuBERT-large ONNX is written;
# 2. CLI new processes, the example, three each, in turn: this tree (cli: HuBERT and the LMDM primed,
#    Triton's key hashed while the models load), without the LMDM priming, without the Triton hash,
#    and without all three (main before this session).
# One archive, rewritten after each step. Carry as call 1.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-400}
O=/tmp/o3; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call3.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout 100 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_lmdm_sampler.py \
  tests/test_pipeline.py tests/test_triton_launch.py tests/test_hubert_torch.py -k "prim or triton or graph_replay" \
  > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; tail -3 $O/gpu_tests.log; pack
wait $HUBERT_PID; stamp "hubert written" $?; tail -1 $O/make_hubert.log
timeout $(( $(left) - 5 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg \
  --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-nolmdmprime cli-notritonhash \
  cli-nohubertprime-nolmdmprime-notritonhash --repeats 3 --out $O/ttv_prime.json > $O/ttv_prime.log 2>&1
stamp "priming" $?; grep -E "^example/cli" $O/ttv_prime.log | cut -c1-330; pack
