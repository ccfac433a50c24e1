#!/bin/bash
# Prepared in session 33 for the next device call (not yet run).
# 1. The fix for call 4's abort (CapturedCall replays a recording once under cudaMallocAsync, so
#    that an owner dropped after its only recorded call frees graph memory that exists): the new
#    GPU test on main (expect a pass) and on main with capture_replay.patch reversed (expect the
#    abort the test names), then the cuda_graphs and sampler GPU tests on main.
# 2. first_prompt_probe.py "prewarmed" and "prewarmedzeros" beside "main" (call 4's prewarmed runs
#    died of that abort): would a process warmed before its first prompt render it near a warm one,
#    and does warming on zeros alone (what a feature would do at ComfyUI's start) do as well?
#    Round 1 is cold.
# Carry [".whl", ".carry"].
set -u
START=$(date +%s)
S=bench/measurements/2026-12-06-h100-s33
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
export PYTHONPATH=$PWD:$PYTHONPATH
b=/tmp/before; rm -rf $b && mkdir $b && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C $b
patch -s -R -p1 -d $b < $S/capture_replay.patch || exit 1
echo "preamble s $(( $(date +%s) - START ))"
T="tests/test_cuda_graphs.py::test_an_owner_dropped_after_its_only_recorded_call_frees_the_recording_cleanly"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider $T 2>&1 | tail -1
(cd $b && PYTHONPATH=$b:/tmp/site timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider $T 2>&1 | grep -E "passed|failed|invalid argument|terminate" | head -4)
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_graphs.py tests/test_lmdm_sampler.py 2>&1 | tail -1
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
mkdir -p $OUT/probe
for round in 1 2 3 4; do
  for v in main prewarmed prewarmedzeros; do
    left=$((580 - $(date +%s) + START)); [ $left -lt 30 ] && break 2
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $left python3 $S/first_prompt_probe.py $v /tmp/models \
      $E/portrait.jpg $E/speech_24k_mono.wav $OUT/probe/${v}_$round.json 1 > $OUT/probe/${v}_$round.txt 2>>$OUT/probe/stderr.log
    head -1 $OUT/probe/${v}_$round.txt | cut -c1-700
  done
done
rm -f $OUT/probe/*.mp4; rm -rf $OUT/probe/avatars
