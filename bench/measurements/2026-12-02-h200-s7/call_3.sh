#!/bin/bash
# Device call 3: GPU tests of the new code, time to video (three warm-up variants), delivered frames/s per preset.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pyc DITTO_SHARED=$PWD/.carry/shared DITTO_TEST_CKPT_DIR=/tmp/models
SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
timeout 100 python3 -m compileall -q -j 16 $SP/torch $SP/sympy $SP/triton $SP/networkx $SP/mpmath $SP/jinja2 $SP/numpy $SP/onnx $SP/onnxruntime $SP/safetensors $SP/cv2 /tmp/site ditto_core bench tests > /dev/null 2>&1
python3 .carry/shared/reference/make_checkpoints.py --out /tmp/models --seed 0 > /dev/null
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx 2>&1 | tail -1
SECONDS=0
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_hubert_torch.py tests/test_video_colour.py tests/test_video_writer.py tests/test_video_segments.py tests/test_warp_decode.py -k "not matches_eager_fp32 and not half_precision" -rA 2>&1 | tee $OUT/gpu_tests_3.log | grep -E "passed|failed|PASSED|FAILED|ERROR|rel-L2|error|warm-up" | tail -25
echo "gpu tests s $SECONDS"
E=.carry/shared/data/ditto_example
TTV="python3 -m bench.bench_time_to_video --models /tmp/models --hubert /tmp/hubert/hubert_streaming_fix_kv.onnx --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 150"
SECONDS=0
timeout 230 $TTV --clips example --warmups cli foreground background --out $OUT/ttv_3_example.json 2>&1 | tail -13
echo "ttv s $SECONDS"
SECONDS=0
timeout 200 python3 -m bench.bench_delivered --presets ultrafast superfast veryfast medium --out $OUT/delivered_3.json 2>&1 | tail -8
echo "delivered s $SECONDS"
