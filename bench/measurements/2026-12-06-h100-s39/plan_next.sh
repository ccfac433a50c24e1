#!/bin/bash
# Prepared in session 39 for the next device call (not run: its device time was spent).
# 1. Whether a CUDA graph recorded inside a green context keeps to its SMs (green_record_probe.py,
#    PyTorch's own green-context path; green_capture_probe.py, the driver API with a Triton kernel),
#    then with the real networks: the render compiled and recorded inside the 116-SM partition,
#    the LMDM window beside it (green_render_probe.py).
# 2. hubert_priming.patch (HuBERT's first forward made on a thread while the networks load) in a
#    copy of the tree: its GPU test, then bench_time_to_video's CLI, main against the patched copy,
#    three new processes each (warm caches from a first-ever run of main).
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
HERE=$PWD
D=bench/measurements/2026-12-06-h100-s39
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
timeout 90 python3 $D/green_record_probe.py 2>&1 | tail -2 | cut -c1-1500
timeout 90 python3 $D/green_capture_probe.py 2>&1 | tail -1 | cut -c1-1500
PYTHONPATH=$PWD:$PYTHONPATH timeout 240 python3 $D/green_render_probe.py > $OUT/green_render.log 2> $OUT/green_render.err
echo "render probe rc $? s $(( $(date +%s) - START ))"; tail -1 $OUT/green_render.log | cut -c1-1500
rm -rf /tmp/after && cp -r $HERE /tmp/after && (cd /tmp/after && git apply $HERE/$D/hubert_priming.patch) || exit 1
(cd /tmp/after && timeout 60 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE \
  tests/test_hubert_torch.py 2>&1 | tail -2)
echo "preamble and probes s $(( $(date +%s) - START ))"
for v in main after; do
  left=$((585 - $(date +%s) + START)); [ $left -lt 60 ] && break
  tree=$HERE; [ $v = after ] && tree=/tmp/after
  (cd $tree && PYTHONPATH=$tree:/tmp/site timeout $left python3 -m bench.bench_time_to_video --models /tmp/models \
    --hubert $H --image $HERE/$E/portrait.jpg --audio $HERE/$E/speech_24k_mono.wav --clips example --warmups cli \
    --repeats 3 --out $OUT/ttv_$v.json > $OUT/ttv_$v.log 2>&1)
  echo "$v ttv rc $? s $(( $(date +%s) - START ))"; grep -iE "new.process|warm_process" $OUT/ttv_$v.log | cut -c1-300 | head -4
done
