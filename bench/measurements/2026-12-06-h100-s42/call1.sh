#!/bin/bash
# Session 42, call 1 (run as `END=135 REPEATS=1 bash call1.sh`: the 135 s that the session's device
# time held after its refused starts), on branch s42-hubert-prime (main with hubert_prime.patch):
# HuBERT primed while the networks load (cli) against not (cli-nohubertprime), CLI new processes in
# turn; HuBERT's GPU tests; then, as time allows, session 41's down_pool.patch probe. Session 19's
# preamble without its compileall: the first child writes the bytecode the later ones read
# (PYTHONPYCACHEPREFIX), in both variants alike.
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
S41=bench/measurements/2026-12-06-h100-s41
END=${END:-225}
HERE=$PWD
O=/tmp/o; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call1.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pyc
unset PYTHONDONTWRITEBYTECODE
python3 .carry/shared/reference/make_checkpoints.py --out /tmp/models --seed 0 > /dev/null &
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx 2>&1 | tail -1
wait
E=.carry/shared/data/ditto_example H=/tmp/hubert/hubert_streaming_fix_kv.onnx
echo "preamble s $(( $(date +%s) - START ))"
timeout $(( $(left) - 35 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg \
  --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-nohubertprime --repeats ${REPEATS:-2} \
  --out $O/ttv_hubert_prime.json > $O/ttv_hubert_prime.log 2>&1
stamp "hubert prime" $?; grep -E "^example/cli" $O/ttv_hubert_prime.log | cut -c1-500; pack
timeout $(( $(left) - 5 )) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_hubert_torch.py > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; tail -3 $O/gpu_tests.log; pack
[ $(left) -lt 40 ] && exit 0
rm -rf /tmp/after && cp -r . /tmp/after && (cd /tmp/after && git apply $HERE/$S41/down_pool.patch) || exit 1
(cd /tmp/after && PYTHONPATH=/tmp/after:/tmp/site timeout $(left) python3 $S41/eager_down_pool.py > $O/eager_down_pool.log 2>&1)
stamp probe $?; grep -v -i warn $O/eager_down_pool.log | tail -8; pack
