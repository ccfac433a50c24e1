#!/bin/bash
# Session 37, call 1: the GPU tests of the code landed without a device (session 36's H.264
# device conversion, session 25's LMDM copy reductions), then session 25's LMDM plan
# (bench/measurements/2026-12-05-cpu-s25/plan_next_lmdm.sh, never run): bench_lmdm at 25 steps,
# batch 1, main ("after") against main with .carry/lmdm_cat.patch reversed ("before"), and on main
# each attention backend for the compiled bf16 sampler and Inductor's max_autotune.
# Carry [".whl", ".carry/shared", ".carry/lmdm_cat.patch"].
set -u
START=$(date +%s); T0=$SECONDS
OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/old && mkdir /tmp/old && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/old
patch -s -R -p1 -d /tmp/old < .carry/lmdm_cat.patch || exit 1
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 260 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE -s tests/test_live_gpu.py \
  tests/test_video_colour.py tests/test_lmdm_sampler.py tests/test_lmdm.py > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; grep -E "h264 against|passed|failed|Error" $OUT/gpu_tests.log | cut -c1-300 | tail -8; SECONDS=0
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_lmdm
left=$((470 - $(date +%s) + START))
timeout $left python3 -m bench.bench_lmdm --steps 25 --compile bf16 --sdpa flash efficient cudnn --autotune \
  --out $OUT/lmdm_after.json > $OUT/lmdm_after.log 2>&1; echo "after rc $? s $SECONDS"; SECONDS=0
left=$((585 - $(date +%s) + START))
(cd /tmp/old && timeout $left python3 -m bench.bench_lmdm --steps 25 --compile bf16 --out $OUT/lmdm_before.json > $OUT/lmdm_before.log 2>&1)
echo "before rc $? s $SECONDS"
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
for name in sorted(os.listdir(out)):
    if name.startswith("lmdm_") and name.endswith(".json"):
        row = json.load(open(os.path.join(out, name)))["per_window"]["25"]
        print(name, {k: round(v["median_ms"], 3) for k, v in row.items() if isinstance(v, dict) and "median_ms" in v and "sequence" not in k})
PY
tail -3 $OUT/lmdm_after.log $OUT/lmdm_before.log | cut -c1-300
echo "end s $(( $(date +%s) - START ))"
