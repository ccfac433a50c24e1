#!/bin/bash
# Session 32, call 1: the saved-function probe (saved_step_probe.py: one build with empty caches,
# then new processes that load it, alternating with new processes that run the step eagerly, all
# under ComfyUI's allocator), then the GPU tests of main until the call's time is up.
# Carry [".whl", ".carry"] (.carry: shared/ with the cases the GPU tests read, bar the appearance
# extractor's and the decoder's; comfyui_src.tgz).
set -u
START=$(date +%s); T0=$SECONDS
. bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
P=bench/measurements/2026-12-06-h100-s32/saved_step_probe.py
export PYTHONPATH=$PWD:$PYTHONPATH TORCHINDUCTOR_CACHE_DIR=/tmp/inductor PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
timeout 200 python3 $P build /tmp/models /tmp/step.bin > $OUT/probe.jsonl 2> $OUT/probe_build.err; echo "build rc $? s $SECONDS"
for i in 1 2; do
  timeout 60 python3 $P load /tmp/models /tmp/step.bin >> $OUT/probe.jsonl 2>> $OUT/probe_load.err; echo "load rc $?"
  timeout 60 python3 $P eager /tmp/models >> $OUT/probe.jsonl 2>> $OUT/probe_eager.err; echo "eager rc $?"
done
cat $OUT/probe.jsonl; tail -3 $OUT/probe_build.err $OUT/probe_load.err | cut -c1-400
unset PYTORCH_CUDA_ALLOC_CONF TORCHINDUCTOR_CACHE_DIR
echo "probe s $SECONDS"; SECONDS=0
timeout $((590 - $(date +%s) + START)) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE \
  --deselect tests/test_appearance_extractor.py::test_reference_parity_cuda tests/ > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; tail -15 $OUT/gpu_tests.log | cut -c1-300
