#!/bin/bash
# Session 58, call 4: why call 2's live GPU test died (SIGSEGV in the LMDM window's CUDA-graph replay)
# after the LMDM sampler's GPU tests in the same process. graph_reuse_probe.py (three children), then
# the failing pair of test files again, under gdb where the image has it (native stacks), then the
# live tests alone.
# Run from main: END=230 (the device time left; the probe only) or END=500 bash bench/measurements/2026-12-07-h100-s58/call4.sh
# Carry [".whl", ".carry/shared"].
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp preamble 0
S=bench/measurements/2026-12-07-h100-s58
export PYTHONPATH=$PWD:$PYTHONPATH
timeout $(( $(left) - 10 )) python3 $S/graph_reuse_probe.py > $OUT/graph_reuse_probe.log 2>&1
stamp "graph reuse probe" $?; grep -E "exit" $OUT/graph_reuse_probe.log
[ $(left) -lt 200 ] && exit 0
which gdb > /dev/null 2>&1 && GDB="gdb -q -batch -ex run -ex bt -ex 'info sharedlibrary' --args" || GDB=""
echo "gdb: ${GDB:-none}"
timeout $(( $(left) - 100 )) ${GDB:+gdb -q -batch -ex run -ex bt --args} python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider \
  --no-header -rfE --tb=short -x tests/test_lmdm_sampler.py::test_compiled_graph_equals_eager \
  tests/test_live_gpu.py::test_a_compiled_stream_delivers_its_first_frame_and_then_every_frame > $OUT/pair.log 2>&1
stamp "compiled sampler tests then the live stream" $?; grep -E "PASSED|FAILED|ERROR|Segmentation|SIGSEGV|^#[0-9]+ " $OUT/pair.log | head -40
gpu_pytest $(( $(left) - 5 )) tests/test_live_gpu.py::test_a_compiled_stream_delivers_its_first_frame_and_then_every_frame > $OUT/live_alone.log 2>&1
stamp "the live stream alone" $?; tail -1 $OUT/live_alone.log
