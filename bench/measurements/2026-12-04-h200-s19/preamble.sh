# Sourced by each device call of session 19: session 18's preamble (wheels, bytecode cache, random
# checkpoints, the HuBERT-large ONNX only where the call asks for it with NEED_HUBERT=1).
if [ ! -d /tmp/site/av ] || [ ! -d /tmp/site/soxr ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pyc
# The image sets PYTHONDONTWRITEBYTECODE: every process compiled from source each module the
# compileall below missed (0.7 s of a new process in call 2's profile). A user's interpreter
# keeps the bytecode it compiles (or pip wrote it at install), and so do these children now.
echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE-unset}"
unset PYTHONDONTWRITEBYTECODE
if [ ! -f /tmp/pyc/.done ]; then
  SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  timeout 100 python3 -m compileall -q -j 16 $SP/torch $SP/sympy $SP/triton $SP/networkx $SP/mpmath $SP/jinja2 $SP/numpy $SP/onnx $SP/onnxruntime $SP/safetensors $SP/cv2 $SP/aiohttp /tmp/site > /dev/null 2>&1
  mkdir -p /tmp/pyc && touch /tmp/pyc/.done
fi
timeout 60 python3 -m compileall -q -j 16 ditto_core bench tests > /dev/null 2>&1
[ -f /tmp/models/decoder.pth ] || python3 .carry/shared/reference/make_checkpoints.py --out /tmp/models --seed 0 > /dev/null
if [ "${NEED_HUBERT:-0}" = 1 ] && [ ! -f /tmp/hubert/hubert_streaming_fix_kv.onnx ]; then
  python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx 2>&1 | tail -1
fi
export E=.carry/shared/data/ditto_example H=/tmp/hubert/hubert_streaming_fix_kv.onnx
export DITTO_SHARED=$PWD/.carry/shared DITTO_TEST_CKPT_DIR=/tmp/models
