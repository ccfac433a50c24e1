#!/bin/bash
# Device call 2: time to video (issue 15) with the real-architecture HuBERT, and the HuBERT benchmark.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1
# The device's torch install carries no bytecode (every import compiles its source, ~12 s a process);
# a user's pip install does. Give every process one writable bytecode cache and fill it once.
export PYTHONPYCACHEPREFIX=/tmp/pyc
SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
SECONDS=0
timeout 100 python3 -m compileall -q -j 16 $SP/torch $SP/sympy $SP/triton $SP/networkx $SP/mpmath $SP/jinja2 $SP/numpy $SP/onnx $SP/onnxruntime $SP/safetensors $SP/filelock $SP/fsspec $SP/typing_extensions.py $SP/cv2 /tmp/site ditto_core bench > /dev/null 2>&1
echo "compileall s $SECONDS"
for i in 1 2; do python3 -c "import time; t=time.time(); import torch; print('import torch s', round(time.time()-t,2))"; done
python3 .carry/shared/reference/make_checkpoints.py --out /tmp/models --seed 0 > /dev/null
SECONDS=0; python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx 2>&1 | tail -2; echo "make_hubert_large s $SECONDS"
E=.carry/shared/data/ditto_example
timeout 120 python3 -m bench.bench_hubert --model /tmp/hubert/hubert_streaming_fix_kv.onnx --audio $E/speech_24k_mono.wav --skip-cpu-torch --repeats 3 --out $OUT/hubert_2.json 2>&1 | tail -8
TTV="python3 -m bench.bench_time_to_video --models /tmp/models --hubert /tmp/hubert/hubert_streaming_fix_kv.onnx --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 200"
timeout 290 $TTV --clips example --warmups background foreground --out $OUT/ttv_2_example.json 2>&1 | tail -12
