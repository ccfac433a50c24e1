#!/bin/bash
# Session 43, call 1 (about 560 s on one GPU; the first H200 offered since session 37):
# 1. the down blocks' kernel's GPU tests while the HuBERT-large ONNX is written;
# 2. the tree (branch s43-prime: session 42's HuBERT priming and the LMDM sampler's): CLI new
#    processes with both primings (cli) and without one (-nohubertprime, -nolmdmprime), the example
#    clip, three each;
# 3. bench_live at 12 and 10 streams (JPEG, 10 s of speech each, the goal's level first);
# 4. as time allows, session 42's first_use.py twice: what a new process's first eager batch pays,
#    module by module.
# One archive, rewritten after each step. Carry as session 42's plan_next.sh.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
HERE=$PWD
D42=bench/measurements/2026-12-06-h100-s42
END=${END:-560}
O=/tmp/o; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call1.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout 100 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_down_pool_triton.py \
  tests/test_triton_kernels.py "tests/test_lmdm_sampler.py::test_a_primed_sampler_records_its_window_on_the_priming_thread_and_replays_it" \
  tests/test_lmdm_sampler.py::test_cuda_graph_replay_equals_eager > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; tail -3 $O/gpu_tests.log; pack
wait $HUBERT_PID; stamp "hubert written" $?; tail -1 $O/make_hubert.log
timeout 190 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg \
  --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-nohubertprime cli-nolmdmprime --repeats 3 --out $O/ttv_prime.json > $O/ttv_prime.log 2>&1
stamp "priming" $?; grep -E "^example/cli" $O/ttv_prime.log | cut -c1-300
timeout 30 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_hubert_torch.py \
  -k "prim" > $O/gpu_tests_hubert.log 2>&1; stamp "hubert gpu tests" $?; tail -1 $O/gpu_tests_hubert.log; pack
timeout $(( $(left) - 70 )) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --parts concurrency \
  --streams 12 10 --out $O/live_main.json > $O/live_main.log 2>&1
stamp "live" $?
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py main=$O/live_main.json
pack
for run in 1 2; do
  [ $(left) -lt 40 ] && break
  timeout 35 python3 $D42/first_use.py > $O/first_use_$run.log 2>&1
  stamp "first use $run" $?
done
grep -v -i warn $O/first_use_2.log | head -40; pack
