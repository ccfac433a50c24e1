#!/bin/bash
# Prepared in session 43 for the next device call (about 560 s on one GPU). Session 43 changed how
# CUDA-graph recordings and device-wide calls take turns (cuda_graphs.between_recordings; recordings
# counted, and exclusive, under the native allocator too) after its last device call: nothing of that
# has run on a GPU yet.
# 1. the GPU tests of every file that records or synchronises (the new stage-timer test among them),
#    while the HuBERT-large ONNX is written;
# 2. CLI new processes and warm jobs, the example, three each (main against session 43's calls: 5.16-5.70 s, warm 1.54-1.59 s, H200);
# 3. bench_live at 10 and 12 streams (a runtime's warm-up records beside its render thread's; the
#    live GPU tests, last in step 1, leave its compile caches warm).
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-560}
O=/tmp/o; mkdir -p $O
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
echo "preamble s $(( $(date +%s) - START ))"
timeout 260 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_cuda_graphs.py \
  tests/test_lmdm_sampler.py tests/test_motion_ahead.py tests/test_live_stitch.py tests/test_warp_decode.py \
  tests/test_live_gpu.py > $O/gpu_tests.log 2>&1
stamp "gpu tests" $?; tail -3 $O/gpu_tests.log; pack
wait $HUBERT_PID; stamp "hubert written" $?; tail -1 $O/make_hubert.log
timeout 100 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg \
  --audio $E/speech_24k_mono.wav --clips example --warmups cli --repeats 3 --out $O/ttv.json > $O/ttv.log 2>&1
stamp "ttv" $?; grep -E "^example/cli" $O/ttv.log | cut -c1-300; pack
[ $(left) -lt 60 ] && exit 0
timeout $(( $(left) - 5 )) python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --parts concurrency \
  --streams 10 12 --out $O/live.json > $O/live.log 2>&1
stamp "live" $?
python3 bench/measurements/2026-12-06-h100-s39/summarise_live.py main=$O/live.json
pack
