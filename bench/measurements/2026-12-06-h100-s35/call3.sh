#!/bin/bash
# Session 35, call 3, after call 2 found (a) the CLI crashing with the motion ahead by default (a
# window graph recorded in inference mode on the worker, replayed under no_grad by the next clip;
# fixed in CapturedCall.replay) and (b) bench_comfyui's packs all importing the checkout on
# PYTHONPATH (fixed: the server's PYTHONPATH drops such folders). Carry [".whl", ".carry"].
# 1. GPU tests: the grad-mode replay, the recording without a warm-up, replay = eager.
# 2. eager_ops.py (its forward hook fixed).
# 3. A real ComfyUI: packs main (motion ahead where it pays) and serial (default motion_ahead=False).
# 4. bench_time_to_video's CLI: the default against -serial, 3 new processes each.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
S=bench/measurements/2026-12-06-h100-s35
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh > /dev/null
rm -rf /tmp/serial && mkdir /tmp/serial && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/serial
sed -i 's/motion_ahead: Optional\[bool\] = None,/motion_ahead: Optional[bool] = False,/' /tmp/serial/ditto_core/pipeline.py
grep -c "motion_ahead: Optional\[bool\] = False," /tmp/serial/ditto_core/pipeline.py || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
echo "preamble s $(( $(date +%s) - START ))"
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_lmdm_sampler.py -k \
  "grad_mode or put_off or replay_equals" 2>&1 | grep -E "passed|failed|Error" | tail -4
timeout 80 python3 $S/eager_ops.py 2>&1 | grep -v -i warn | cut -c1-330 | head -34
echo "ops done s $(( $(date +%s) - START ))"
left=$((400 - $(date +%s) + START))
timeout $left python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. --pack serial=/tmp/serial \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 90 --out $OUT/comfyui.json > /tmp/comfyui.log 2>&1
echo "comfyui rc $? s $(( $(date +%s) - START ))"
grep -E "^(main|serial|goal)" /tmp/comfyui.log | cut -c1-420
left=$((585 - $(date +%s) + START))
[ $left -gt 60 ] && timeout $left python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
    --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-serial --repeats 3 \
    --out $OUT/ttv.json > /tmp/ttv.log 2>&1
echo "ttv rc $?"; grep -iE "new.process|warm_process|goal example/cli" /tmp/ttv.log | cut -c1-330 | head -10
echo "end s $(( $(date +%s) - START ))"
