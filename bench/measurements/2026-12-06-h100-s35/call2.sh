#!/bin/bash
# Session 35, call 2: the motion ahead of the render by default where it starts cold beside an
# eager render (DittoPipeline.motion_goes_ahead). Carry [".whl", ".carry"].
# 1. eager_ops.py: which ops launch the eager batch's strided adds and copies.
# 2. first_prompt_probe.py via ahead_probe.py, 2 rounds: serial (motion_ahead=False) in main and in
#    nocapskip (every recording warms up, as before capture_skip.patch), the LMDM windows' timeline printed; ahead (forced on).
# 3. A real ComfyUI (bench_comfyui, as session 34's call 4): packs main (the new default) and serial
#    (main with the default motion_ahead=False), two relaunches each.
# 4. bench_time_to_video's CLI, the default against -serial, 3 new processes each.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
S=bench/measurements/2026-12-06-h100-s35
nvidia-smi --query-gpu=name --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh > /dev/null
for v in nocapskip serial; do
  rm -rf /tmp/$v && mkdir /tmp/$v && tar --exclude=./.whl --exclude=./.carry -cf - . | tar -xf - -C /tmp/$v
done
# nocapskip: every recording warms up again (capture_skip.patch's effect undone in one line)
sed -i 's/result = captured.capture(warm_up=key not in ran_eagerly)/result = captured.capture()/' /tmp/nocapskip/ditto_core/motion/lmdm_sampler.py
grep -c "result = captured.capture()$" /tmp/nocapskip/ditto_core/motion/lmdm_sampler.py || exit 1
sed -i 's/motion_ahead: Optional\[bool\] = None,/motion_ahead: Optional[bool] = False,/' /tmp/serial/ditto_core/pipeline.py
grep -c "motion_ahead: Optional\[bool\] = False," /tmp/serial/ditto_core/pipeline.py || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
echo "preamble s $(( $(date +%s) - START ))"
timeout 90 python3 $S/eager_ops.py 2>&1 | grep -v -i warn | cut -c1-330 | head -34
mkdir -p /tmp/models/aux_models && ln -sf $H /tmp/models/aux_models/hubert_streaming_fix_kv.onnx
P=$PWD/$S/ahead_probe.py
for round in 1 2; do
  for v in serial nocapskip ahead; do
    left=$((230 - $(date +%s) + START)); [ $left -lt 20 ] && break 2
    tree=$PWD; mode=serial
    case $v in ahead) mode=ahead;; nocapskip) tree=/tmp/nocapskip;; esac
    (cd $tree && PYTHONPATH=$tree:/tmp/site PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $left python3 $P $mode \
      /tmp/models $OLDPWD/$E/portrait.jpg $OLDPWD/$E/speech_24k_mono.wav /tmp/probe2_${v}_$round.json 1 > /tmp/probe2_${v}_$round.txt 2>>/tmp/probe2_stderr.log)
    echo "$v $round $(head -1 /tmp/probe2_${v}_$round.txt | cut -c1-330)"
    [ $v = ahead ] || python3 -c "import json,sys; print('   ', [e[1:] for e in json.load(open(sys.argv[1]))['events'] if e[0] in ('lmdm_window','priming')])" /tmp/probe2_${v}_$round.json 2>/dev/null | cut -c1-600
  done
done
echo "probes done s $(( $(date +%s) - START ))"
left=$((470 - $(date +%s) + START))
timeout $left python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 \
  --models /tmp/models --hubert $H --pack main=. --pack serial=/tmp/serial \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --warm-rounds 1 --idle-before-warm 10 \
  --linger-after-first 90 --out $OUT/comfyui.json > /tmp/comfyui.log 2>&1
echo "comfyui rc $? s $(( $(date +%s) - START ))"
grep -E "^(main|serial|goal)" /tmp/comfyui.log | cut -c1-400
left=$((580 - $(date +%s) + START))
[ $left -gt 60 ] && timeout $left python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H \
    --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --clips example --warmups cli cli-serial --repeats 3 \
    --out $OUT/ttv.json > /tmp/ttv.log 2>&1
echo "ttv rc $?"; grep -iE "new.process|warm_process|goal" /tmp/ttv.log | cut -c1-300 | head -10
tail -3 /tmp/comfyui.log | cut -c1-300
echo "end s $(( $(date +%s) - START ))"
