#!/bin/bash
# Prepared in session 28 for the next device session (not yet run). Carry [".whl", ".carry"].
# 1. GPU tests of what session 28 changed after its last call: the mask conv's autotuning key by
#    slice class (its kernels compiled for the GPU), the encoders' wait for a busy GPU, recordings
#    taking turns with background work (every CapturedCall now waits for its turn).
# 2. second_clip_probe.py again: clip 2 (the first compiled clip) should now take what clip 3 does
#    (call 5: 1.97 against 1.08 s, 0.75 s of it a tuning of the 2-frame tail's slice count).
# 3. main in a real ComfyUI, three relaunches, two warm rounds: the first prompt after the compile
#    against the goal, with the render's split (producer waiting for the encoders, encoders for the GPU).
# Then plan_next_live.sh (another call).
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-05-h100-s28/comfyui_preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_slice_conv_triton.py tests/test_triton_kernels.py \
  tests/test_video_writer.py tests/test_cuda_graphs.py tests/test_lmdm_sampler.py > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? s $SECONDS"; tail -2 $OUT/gpu_tests.log
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync TORCHINDUCTOR_CACHE_DIR=/tmp/ind_probe timeout 150 env PYTHONPATH=$PWD:$PYTHONPATH \
  python3 bench/measurements/2026-12-05-h100-s28/second_clip_probe.py /tmp/models $OUT/second_clip.json 2>&1 | tail -4 | cut -c1-300
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 150 ] || exit 0
timeout $LEFT python3 -m bench.bench_comfyui --comfyui /tmp/comfyui --comfyui-python python3 --models /tmp/models --hubert $H \
  --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 3 --warm-rounds 2 --idle-before-warm 10 \
  --linger-after-first 45 --out $OUT/comfyui.json > $OUT/comfyui.log 2>&1; echo "bench rc $? s $SECONDS"
grep -E "^(main|log|goal)" $OUT/comfyui.log | cut -c1-400
