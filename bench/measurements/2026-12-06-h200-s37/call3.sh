#!/bin/bash
# Session 37, call 3 (same H200 as calls 1-2, caches warm), run as one command line: bench_live
# with JPEG at 8 and 12 streams, H.264 at 12, then the LMDM, sampler and colour GPU tests that
# call 1's 260-s limit cut off. Carry [".whl", ".carry/shared"].
set -u; OUT=$(cd "$OUT" && pwd); NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
S=$SECONDS; timeout 200 python3 -m bench.bench_live --hubert $H --output jpeg --streams 8 12 --seconds 12 --parts concurrency --every-level --out $OUT/live_jpeg.json > $OUT/live_jpeg.log 2>&1; echo "jpeg rc $? s $((SECONDS-S))"
S=$SECONDS; timeout 150 python3 -m bench.bench_live --hubert $H --output h264 --streams 12 --seconds 12 --parts concurrency --out $OUT/live_h264_12.json > $OUT/live_h264_12.log 2>&1; echo "h264 12 rc $? s $((SECONDS-S))"
S=$SECONDS; timeout 200 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_lmdm_sampler.py tests/test_lmdm.py tests/test_video_colour.py > $OUT/gpu_tests2.log 2>&1; echo "tests rc $? s $((SECONDS-S))"; tail -5 $OUT/gpu_tests2.log | cut -c1-300
