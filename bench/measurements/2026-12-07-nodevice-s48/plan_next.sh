#!/bin/bash
# The next device call (about 560 s, any machine), written in session 48, which had no device
# time (session 47's spent it for the same stop). Session 47's plan (removed from its folder), with the reverse
# patch regenerated for today's tree (its own no longer applies: compilation.py moved on) and
# the CLI's time to video added, for the 5-s goal on whatever card comes (H200 wanted):
# 1. the graph-tree GPU test (its replaying and recompiling forms) three times;
# 2. the GPU tests of every file that records, synchronises or renders from graph trees (the
#    live render thread now runs inside compilation.graph_tree_thread);
# 3. bench_time_to_video, the CLI's new process (4 children), real-architecture HuBERT;
# 4. with the time left, bench_live at 10 streams: this tree, a copy with the graph-tree turn
#    reversed (graph_tree_turn_reversed_at_36f1b48.patch, applied forward), this tree again.
# Run from main: END=560 bash bench/measurements/2026-12-07-nodevice-s48/plan_next.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json",
#        ".carry/shared/reference/cases"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-560}
O=/tmp/o2; mkdir -p $O
D=$PWD/bench/measurements/2026-12-07-nodevice-s48
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
gpu_pytest() { timeout $1 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short "${@:2}"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
python3 -m bench.make_hubert_large --out $H > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
for i in 1 2 3; do
  gpu_pytest 150 tests/test_warp_decode.py -k graph_tree_records > $O/graph_tree_$i.log 2>&1
  stamp "graph-tree test $i" $?; grep -E "PASSED|FAILED|ERROR|^E " $O/graph_tree_$i.log | cut -c1-200 | head -8
done; pack
gpu_pytest $(( $(left) - 300 )) tests/test_warp_decode.py tests/test_cuda_graphs.py tests/test_lmdm_sampler.py \
  tests/test_live_render.py tests/test_live_gpu.py -k "not graph_tree_records" > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; grep -E "PASSED|FAILED|ERROR" $O/gpu_tests.log | cut -c1-160; tail -1 $O/gpu_tests.log; pack
wait $HUBERT_PID
timeout $(( $(left) - 200 )) python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli --repeats 4 \
  --out $O/ttv.json > $O/ttv.log 2>&1
stamp "ttv" $?; grep -E "^example/" $O/ttv.log | cut -c1-330; pack
rm -rf /tmp/m && mkdir /tmp/m && cp -r ditto_core bench tests nodes __init__.py pyproject.toml /tmp/m/ \
  && (cd /tmp/m && git apply $D/graph_tree_turn_reversed_at_36f1b48.patch) || exit 1
live() {  # name dir
  [ $(left) -gt 60 ] || return
  (cd $2 && timeout $(( $(left) - 10 )) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 \
    --parts concurrency --streams 10 --out $O/live_$1.json > $O/live_$1.log 2>&1)
  stamp "live $1" $?; pack
}
live main $PWD
live reversed /tmp/m
live main2 $PWD
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py main=$O/live_main.json reversed=$O/live_reversed.json \
  main2=$O/live_main2.json 2>&1 | tail -12; pack
