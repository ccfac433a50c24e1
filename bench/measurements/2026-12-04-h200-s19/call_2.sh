#!/bin/bash
# Device call 2 (session 19), issue 15: the render command in its own process against the same
# command handed to a warm worker (bench_cli_worker), then the CLI's new process with Triton's
# key kept against hashed anew (bench_time_to_video cli cli-tritonhash), then the GPU tests of the
# Triton kernels, put-back, engine, CUDA graphs and the LMDM sampler with the time left.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
timeout 240 python3 -m bench.bench_cli_worker --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --repeats 3 --child-timeout 200 --out $OUT/cli_worker_2.json > $OUT/cli_worker_2.log 2>&1; echo "cli_worker rc $?"
grep -E "^goal" $OUT/cli_worker_2.log
python3 -c "
import json; d=json.load(open('$OUT/cli_worker_2.json'))
print('worker_start', d.get('worker_start')); f=d.get('first_ever',{}); print('first_ever', round(f.get('wall_s',0),2), f.get('ok'))
w=d.get('worker_first_clip',{}); print('worker_first_clip', round(w.get('wall_s',0),2), w.get('handed_off'), w.get('stages_s'))
for v in ('own_process','worker'):
  s=d.get(v,{}); print(v, 'median', s.get('median_s'), [(round(r['wall_s'],2), r['ok'], r['handed_off']) for r in s.get('runs',[])])
  print('  stages', [r.get('stages_s') for r in s.get('runs',[])][:1])" 2>&1 | tail -12
echo "cli_worker s $SECONDS"; SECONDS=0
LEFT=$((430 - $(date +%s) + START))
timeout $LEFT python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 90 --clips example --warmups cli cli-tritonhash --repeats 3 --out $OUT/ttv_2.json > $OUT/ttv_2.log 2>&1; echo "ttv rc $?"
grep -E "^example|^goal" $OUT/ttv_2.log | cut -c1-400
echo "ttv s $SECONDS"; SECONDS=0
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 40 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_triton_kernels.py tests/test_slice_conv_triton.py tests/test_putback.py tests/test_tap_convs.py tests/test_cuda_graphs.py tests/test_lmdm_sampler.py tests/test_warp_decode.py > $OUT/gpu_tests_2.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error|^FAILED" $OUT/gpu_tests_2.log | head -14 | cut -c1-400
echo "tests s $SECONDS"
