#!/bin/bash
# Prepared in session 41 for the next device call (its device time ran out before it could start
# another machine): down_pool.patch (the hourglass encoder's conv bias, ReLU and 2x2 average
# pooling as one Triton kernel in eager half-precision batches, channels-last out) in a copy of the
# tree: its eager batch against main's in one process (eager_down_pool.py), its GPU tests, then the
# CLI on a 60-s clip (eager under ONE_CLIP_COMPILE_MIN_FRAMES), main / patched / main / patched.
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
HERE=$PWD
D=bench/measurements/2026-12-06-h100-s41
left() { echo $(($1 - $(date +%s) + START)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/after && cp -r $HERE /tmp/after && (cd /tmp/after && git apply $HERE/$D/down_pool.patch) || exit 1
echo "preamble s $(( $(date +%s) - START ))"
(cd /tmp/after && PYTHONPATH=/tmp/after:/tmp/site timeout $(left 200) python3 $D/eager_down_pool.py > $OUT/eager_down_pool.log 2>&1)
echo "probe rc $?"; grep -v -i warn $OUT/eager_down_pool.log | tail -8
(cd /tmp/after && PYTHONPATH=/tmp/after:/tmp/site timeout $(left 260) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider \
  --no-header -rfE tests/test_down_pool_triton.py tests/test_triton_kernels.py > $OUT/gpu_tests.log 2>&1)
echo "gpu tests rc $?"; tail -3 $OUT/gpu_tests.log
for round in 1 2; do
  for tree in main after; do
    dir=$HERE; [ $tree = after ] && dir=/tmp/after
    (cd $dir && PYTHONPATH=$dir:/tmp/site timeout $(left 590) python3 -m bench.bench_time_to_video --models /tmp/models \
      --hubert $H --image $HERE/$E/portrait.jpg --audio $HERE/$E/speech_24k_mono.wav --clips 60s --warmups cli \
      --repeats 2 --out $OUT/ttv_${tree}_$round.json > $OUT/ttv_${tree}_$round.log 2>&1)
    echo "$tree $round rc $? s $(( $(date +%s) - START ))"; grep -E "^60s/cli" $OUT/ttv_${tree}_$round.log | cut -c1-200
  done
done
