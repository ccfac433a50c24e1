#!/bin/bash
# Session 58's plan for the next device call: call 2's SIGSEGV, the live stream's first LMDM window
# replay (CUDAGraph.replay on the runtime's motion thread) in a process that had run the LMDM
# sampler's GPU tests before the live tests. The live tests alone passed (sessions 55, 57); call 4's
# graph_reuse_probe.py (compiled samplers kept, dropped before or after another compiled, a second
# batch size) did not reproduce it. First, stream_alias_probe.py: whether our long-lived CUDA streams
# share one of PyTorch's 32 pool streams (a recording on a shared stream takes in the other owner's
# work). Then the pair again under gdb where the image has it (every
# thread's native stack), then each half of the sampler's GPU tests before the live test, in
# processes of their own, to find which test leaves the hazard behind; then the live file alone.
# Session 59 (no device; a CPU probe with Dynamo): the compiled LMDM step is one Dynamo code object
# for every sampler of every model (a new model's sampler reuses the compiled entries), and torch
# allows 8 entries per code object; the sampler tests' fp32/bf16 entries plus the live warm-up's
# batches 1-16 reached it, past which a batch ran eagerly. Since session 59 the pack's compiled steps
# have room for 64 (compilation.RECOMPILE_BUDGET), so a crash gone now may be that change or the owned
# streams. The pairs log Dynamo's recompiles (TORCH_LOGS=recompiles, with -s: a crash loses what
# pytest captured) and the summary counts them.
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s58/plan_next_crash.sh
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#  ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json"].
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp preamble 0
LIVE=tests/test_live_gpu.py::test_a_compiled_stream_delivers_its_first_frame_and_then_every_frame
pair() {  # $1: a name, $2: seconds, then the sampler tests' selection; the live test after them
  local name=$1 seconds=$2; shift 2
  export TORCH_LOGS=recompiles
  if which gdb > /dev/null 2>&1; then
    timeout $seconds gdb -q -batch -ex run -ex "thread apply all bt 30" --args python3 -m pytest -m gpu -v -n 0 \
      -p no:cacheprovider --no-header -rfE --tb=short -s -x "$@" $LIVE > $OUT/pair_$name.log 2>&1
  else
    gpu_pytest $seconds -s -x "$@" $LIVE > $OUT/pair_$name.log 2>&1
  fi
  stamp "pair $name" $?
  unset TORCH_LOGS
  grep -c "Recompiling function guided_step" $OUT/pair_$name.log; grep -m3 "hit config.recompile_limit" $OUT/pair_$name.log
  grep -E "PASSED|FAILED|ERROR|SIGSEGV|Segmentation|^#[0-9]+ " $OUT/pair_$name.log | cut -c1-200 | head -40
}
timeout 120 env PYTHONPATH=$PWD:$PYTHONPATH python3 bench/measurements/2026-12-07-h100-s58/stream_alias_probe.py $E \
  > $OUT/stream_alias.log 2>&1
stamp "stream alias probe" $?; tail -40 $OUT/stream_alias.log
pair all 300 tests/test_lmdm_sampler.py
[ $(left) -lt 120 ] && exit 0
pair compiled 120 tests/test_lmdm_sampler.py -k "compiled_graph_equals_eager or step_graphs_replay"
[ $(left) -lt 120 ] && exit 0
pair recorded 120 tests/test_lmdm_sampler.py -k "not (compiled_graph_equals_eager or step_graphs_replay)"
gpu_pytest $(( $(left) - 5 )) tests/test_live_gpu.py > $OUT/live_alone.log 2>&1
stamp "the live file alone" $?; tail -1 $OUT/live_alone.log
