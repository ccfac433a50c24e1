#!/bin/bash
# Prepared in session 38 for the next device call (not yet run; its last 220 s of budget could
# not start a machine). Measures pinned_to_host.patch (a live pass's encoded frames copied to
# page-locked memory: 3.2 ms a 20-frame pass into pageable memory in session 38's profile):
# 1. its GPU test and pinned_copy_probe.py (to_host alone, pageable against pinned), in a copy
#    of the tree with the patch applied;
# 2. bench_live JPEG at 8, 10 and 12 streams (--every-level), main, then the patched copy
#    (the compile cache warm from the first);
# 3. time left: main at 10 steps, 10 and 12 streams (what a server started with --steps 10 holds).
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
HERE=$PWD
PATCH=$HERE/bench/measurements/2026-12-06-h100-s38/pinned_to_host.patch
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/after && cp -r $HERE /tmp/after
(cd /tmp/after && (git apply "$PATCH" 2>/dev/null || patch -p1 -s < "$PATCH")) || { echo "patch failed"; exit 1; }
echo "preamble s $(( $(date +%s) - START ))"
(cd /tmp/after && PYTHONPATH=$PWD:$PYTHONPATH timeout 60 python3 bench/measurements/2026-12-06-h100-s38/pinned_copy_probe.py 2>&1 | tail -1)
(cd /tmp/after && timeout 90 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_live_render.py 2>&1 | tail -3)
live() {  # tree, name, bench_live flags
  left=$((585 - $(date +%s) + START)); [ $left -lt 60 ] && { echo "$2 skipped"; return; }
  (cd $1 && timeout $left python3 -m bench.bench_live --hubert $H --every-level --seconds 10 --parts concurrency \
    ${@:3} --out $OUT/live_$2.json > $OUT/live_$2.log 2>&1)
  echo "$2 rc $? s $(( $(date +%s) - START ))"
}
live $HERE main --streams 8 10 12
live /tmp/after pinned --streams 8 10 12
live $HERE steps10 --streams 10 12 --steps 10
python3 - <<'PY'
import json, os
for v in ("main", "pinned", "steps10"):
    try:
        d = json.load(open(os.environ["OUT"] + f"/live_{v}.json"))
    except Exception as e:
        print(v, "no json", e); continue
    for var in d["concurrency"]["variants"].values():
        for lvl in var["levels"]:
            r = lvl["rounds"]
            print(v, lvl["streams"], "p50", lvl["chunk_latency_p50_ms_median"], "p95", lvl["chunk_latency_p95_ms_max"],
                  "missing", lvl["frames_missing"], "busy", lvl["load"]["busy"], "rt", lvl["realtime_ok"],
                  "render_ms", r["render_ms"], "motion_ms", r["motion_ms"])
PY
echo "end s $(( $(date +%s) - START ))"
