#!/bin/bash
# Device call 4: delivered frames/s with the writer's short GIL turns against Python's default, time to
# video (CLI and foreground warm-up), a short live-stream run.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pyc
SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
timeout 100 python3 -m compileall -q -j 16 $SP/torch $SP/sympy $SP/triton $SP/networkx $SP/mpmath $SP/jinja2 $SP/numpy $SP/onnx $SP/onnxruntime $SP/safetensors $SP/cv2 $SP/aiohttp /tmp/site ditto_core bench > /dev/null 2>&1
python3 .carry/shared/reference/make_checkpoints.py --out /tmp/models --seed 0 > /dev/null
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx 2>&1 | tail -1
E=.carry/shared/data/ditto_example
SECONDS=0
timeout 140 python3 -m bench.bench_delivered --presets ultrafast superfast medium --gil-intervals 0.0002 0.005 --out $OUT/delivered_4.json 2>&1 | grep -E "GPU-side|wrote"
echo "delivered s $SECONDS"; SECONDS=0
timeout 170 python3 -m bench.bench_time_to_video --models /tmp/models --hubert /tmp/hubert/hubert_streaming_fix_kv.onnx --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 120 --clips example --warmups cli foreground --out $OUT/ttv_4.json 2>&1 | tail -10
echo "ttv s $SECONDS"; SECONDS=0
timeout 90 python3 -m bench.bench_live --hubert /tmp/hubert/hubert_streaming_fix_kv.onnx --avatar $E/portrait.jpg --streams 1 4 12 --seconds 6 --minutes 0.5 --out $OUT/live_4.json 2>&1 | tail -12
echo "live s $SECONDS"
