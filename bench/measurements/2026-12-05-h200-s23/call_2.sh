#!/bin/bash
# Device call 2 (session 23), issue 15's first-ever render: the mask conv's slice count as a
# compile-time constant (main, restored by sed) against a plain argument (branch s20-slice-conv-
# compiles), first-ever renders alternating, two rounds; then the GPU tests of the kernels,
# put-back, decoder and the live runtime (changed in session 22, CPU-tested only).
# Cases carried: putback, decoder.
set -u
START=$(date +%s); T0=$SECONDS
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh
echo "preamble s $((SECONDS-T0))"; SECONDS=0
K=ditto_core/models/slice_conv_triton.py
cp $K /tmp/kernel_branch.py
sed 's/KH: tl.constexpr, KW: tl.constexpr, SLICES,$/KH: tl.constexpr, KW: tl.constexpr, SLICES: tl.constexpr,/' $K > /tmp/kernel_main.py
grep -c "SLICES: tl.constexpr" /tmp/kernel_main.py /tmp/kernel_branch.py
for round in 1 2; do
  for variant in main branch; do
    LEFT=$((300 - $(date +%s) + START)); [ $LEFT -gt 50 ] || break 2
    cp /tmp/kernel_$variant.py $K
    timeout $LEFT python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg --audio $E/speech_24k_mono.wav --child-timeout 120 --clips example --warmups cli --repeats 1 --out $OUT/ttv_${variant}_$round.json > $OUT/ttv_${variant}_$round.log 2>&1; echo "$variant $round rc $?"
    grep -E "^example" $OUT/ttv_${variant}_$round.log | cut -c1-300
  done
done
cp /tmp/kernel_branch.py $K
echo "ttv s $SECONDS"; SECONDS=0
LEFT=$((590 - $(date +%s) + START)); [ $LEFT -gt 30 ] || exit 0
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_slice_conv_triton.py tests/test_triton_kernels.py tests/test_tap_convs.py tests/test_putback.py tests/test_decoder.py tests/test_live_gpu.py tests/test_live_stitch.py tests/test_live_hubert_windows.py > $OUT/gpu_tests_2.log 2>&1
echo "tests rc $?"; grep -E "^E |passed|failed|error|^FAILED" $OUT/gpu_tests_2.log | head -14 | cut -c1-300
echo "tests s $SECONDS"
