#!/bin/bash
# Device call 1 (session 23), issues 15 and 16, on branch s23-device (main + the two prepared
# branches of session 20): GPU tests of the engine (the background warm-up's recorded CUDA graph),
# the MP4 writer (its file object) and the sampler; time to video with ComfyUI's settings compiled
# in the foreground (main) against in the background with the compiled step recorded (branch);
# delivered frames/s at ultrafast, 1500 frames; the render command handed to a warm worker.
# Cases carried: warp_network, lmdm_ddim, motion_extractor (the 64 MiB limit).
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton, av; print(torch.__version__, triton.__version__, av.__version__)"
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_warp_decode.py tests/test_warp_network.py tests/test_cuda_graphs.py tests/test_video_writer.py tests/test_video_segments.py tests/test_video_colour.py tests/test_lmdm_sampler.py tests/test_motion_extractor.py > $OUT/gpu_tests_1.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error|^FAILED" $OUT/gpu_tests_1.log | head -14 | cut -c1-400
echo "tests s $SECONDS"; SECONDS=0
LEFT=$((380 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups foreground background --repeats 3 --out $OUT/ttv_1.json > $OUT/ttv_1.log 2>&1; echo "ttv rc $?"
grep -E "^example|^goal" $OUT/ttv_1.log | cut -c1-400
echo "ttv s $SECONDS"; SECONDS=0
LEFT=$((480 - $(date +%s) + START)); [ $LEFT -gt 40 ] || exit 0
timeout $LEFT python3 -m bench.bench_delivered --presets ultrafast --layouts 1 --frames 1500 --cache-dir /tmp/ind --out $OUT/delivered_1.json > $OUT/delivered_1.log 2>&1; echo "delivered rc $?"
grep -E "GPU side|ultrafast:|Error" $OUT/delivered_1.log | cut -c1-700
echo "delivered s $SECONDS"; SECONDS=0
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 60 ] || exit 0
timeout $LEFT python3 -m bench.bench_cli_worker --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 2 --child-timeout 100 --out $OUT/cli_worker_1.json > $OUT/cli_worker_1.log 2>&1; echo "cli_worker rc $?"
grep -E "^goal|median" $OUT/cli_worker_1.log | head -8
echo "cli_worker s $SECONDS"
