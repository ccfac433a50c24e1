#!/bin/bash
# Prepared in session 42 for the next device call (the session's device time went to refused machine
# starts; its one call ran out of time before the HuBERT comparison). About 420 s on one GPU:
# 1. the GPU tests of the down blocks' kernel (landed in session 42 on its eager-batch probe alone),
#    while the HuBERT-large ONNX is written;
# 2. hubert_prime.patch (HuBERT's first call on zeros while the networks load) in a copy of the
#    tree: CLI new processes with it (cli) and without (cli-nohubertprime), in turn, the example;
# 3. first_use.py twice (the second with Triton's cache warm): what a new process's first eager
#    batch pays, module by module;
# 4. a py-spy sample of main's CLI in a new process (where its 5.5 s go, thread by thread);
# 5. as time allows, the CLI on a 60-s clip, main against main without the down blocks' kernel.
# Everything lands in one archive ($OUT brings back at most eight files), rewritten after each step.
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
# (.whl: PyAV, soxr, torchsde, trampoline and py-spy 0.4.1).
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
HERE=$PWD
D=bench/measurements/2026-12-06-h100-s42
END=${END:-420}
O=/tmp/o; mkdir -p $O/profiles
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Writing the HuBERT-large ONNX took 61 s of session 42's call: it runs beside the preamble and
# the GPU tests, which need no HuBERT and time nothing.
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/primed && cp -r $HERE /tmp/primed && (cd /tmp/primed && git apply $HERE/$D/hubert_prime.patch) || exit 1
rm -rf /tmp/nopool && cp -r $HERE /tmp/nopool && (cd /tmp/nopool && git apply -R --include=ditto_core/models/blocks.py \
  --include=ditto_core/models/down_pool_triton.py $HERE/bench/measurements/2026-12-06-h100-s41/down_pool.patch) || exit 1
echo "preamble s $(( $(date +%s) - START ))"
timeout 90 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_down_pool_triton.py \
  tests/test_triton_kernels.py > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; tail -3 $O/gpu_tests.log; pack
wait $HUBERT_PID; stamp "hubert written" $?; tail -1 $O/make_hubert.log
(cd /tmp/primed && PYTHONPATH=/tmp/primed:/tmp/site timeout $(( $(left) - 240 )) python3 -m bench.bench_time_to_video \
  --models /tmp/models --hubert $H --image $HERE/$E/portrait.jpg --audio $HERE/$E/speech_24k_mono.wav --clips example \
  --warmups cli cli-nohubertprime --repeats 3 --out $O/ttv_hubert_prime.json > $O/ttv_hubert_prime.log 2>&1)
stamp "hubert prime" $?; grep -E "^example/cli" $O/ttv_hubert_prime.log | cut -c1-400; pack
for run in 1 2; do
  timeout 35 python3 $D/first_use.py > $O/first_use_$run.log 2>&1
  stamp "first use $run" $?
done
grep -v -i warn $O/first_use_2.log | head -45; pack
[ $(left) -lt 60 ] && exit 0
timeout $(left) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg \
  --audio $E/speech_24k_mono.wav --clips example --warmups cli --repeats 1 --profile --py-spy /tmp/site/bin/py-spy \
  --profile-dir $O/profiles --out $O/ttv_profiled.json > $O/ttv_profiled.log 2>&1
stamp profiled $?
for f in $O/profiles/*.speedscope.json; do
  [ -f "$f" ] && python3 -m bench.profile_timeline $f --slice 0.1 --depth 3 --top 15 > ${f%.speedscope.json}.txt 2>&1; gzip -f $f
done
pack
for tree in main nopool; do
  dir=$HERE; [ $tree = nopool ] && dir=/tmp/nopool
  [ $(left) -lt 70 ] && break
  (cd $dir && PYTHONPATH=$dir:/tmp/site timeout $(left) python3 -m bench.bench_time_to_video --models /tmp/models \
    --hubert $H --image $HERE/$E/portrait.jpg --audio $HERE/$E/speech_24k_mono.wav --clips 60s --warmups cli \
    --repeats 2 --out $O/ttv_60s_$tree.json > $O/ttv_60s_$tree.log 2>&1)
  stamp "60s $tree" $?; grep -E "^60s/cli" $O/ttv_60s_$tree.log | cut -c1-200
  pack
done
