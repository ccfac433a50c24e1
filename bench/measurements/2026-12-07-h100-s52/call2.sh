#!/bin/bash
# Session 52, call 2: a ComfyUI first prompt's path under its real allocator (cudaMallocAsync, the engine
# deferred), the LMDM recording one step (the default) against whole windows: graph_span_probe.py, one
# job per process, a first-ever run of each, then the two in turn. Call 1's background mode is not the path
# ComfyUI takes under that allocator (nodes/model_registry.py chooses deferred there).
# Not run in session 52 (no device came); session 53 ran its probes (../2026-12-07-h100-s53/call1.sh). Run from main: END=420 bash bench/measurements/2026-12-07-h100-s52/call2.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"]
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-420}
O=/tmp/o2; mkdir -p $O
S=bench/measurements/2026-12-07-h100-s52
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call2.tgz . ; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
export PYTHONPATH=$PWD:$PYTHONPATH
echo "preamble s $(( $(date +%s) - START ))"
for round in first 1 2 3 4; do
  for span in step window; do
    [ $(left) -lt 40 ] && break 2
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $(( $(left) - 10 )) python3 $S/graph_span_probe.py $span \
      /tmp/models $E/portrait.jpg $E/speech_24k_mono.wav $O/${span}_$round.json 1 > $O/${span}_$round.txt 2>>$O/stderr.log
    echo "$span $round rc $? s $(( $(date +%s) - START )): $(head -1 $O/${span}_$round.txt | cut -c1-400)"
    pack
  done
done
pack
