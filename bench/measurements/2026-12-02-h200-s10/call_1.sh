#!/bin/bash
# Device call 1 (session 10): GPU tests of the Triton colour kernel, the side-stream host copy and
# the LMDM 'auto' precision; delivered frames/s (conversion backends, copy streams, x264 alone,
# presets x layouts); time to video with LMDM auto (tf32) against fp32.
set -u
T0=$SECONDS
. .carry/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton, av; print(torch.__version__, triton.__version__, av.__version__)"
timeout 150 python3 -m pytest -q -m gpu tests/test_video_colour.py tests/test_video_writer.py tests/test_video_segments.py tests/test_lmdm_sampler.py tests/test_pipeline.py -p no:cacheprovider > $OUT/gpu_tests.log 2>&1; tail -4 $OUT/gpu_tests.log | cut -c1-400
echo "gpu tests s $SECONDS"; SECONDS=0
timeout 190 python3 -m bench.bench_delivered --presets ultrafast superfast medium --layouts 1 2x7 4x3 --frames 400 --out $OUT/delivered.json > $OUT/delivered.log 2>&1; grep -vE "Warning|warn" $OUT/delivered.log | tail -6 | cut -c1-400
echo "delivered s $SECONDS"; SECONDS=0
timeout 250 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 100 --clips example --warmups foreground foreground-lmdmfp32 cli --out $OUT/ttv.json > $OUT/ttv.log 2>&1; grep -vE "Warning|warn" $OUT/ttv.log | grep -E "^example|wrote|goal" | cut -c1-330
echo "ttv s $SECONDS"
