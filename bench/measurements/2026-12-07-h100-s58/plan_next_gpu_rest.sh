#!/bin/bash
# Session 58's plan: the GPU tests its calls did not reach. Call 1's first half stopped at its 240 s in
# the AOT package test (test_cuda_start after it never ran), and its three reference-parity tests found
# no cases in the carried kit (session 58's .carry lacked them); call 2's second half died with the live
# file (plan_next_crash.sh), so the files after it never ran. Each file alone here, so that one crash
# does not hide the rest. First the streams' GPU test and the CUDA graphs' (session 58 changed where their
# owners' streams come from, after call 1 ran them). Before them, session 59's CPU tests of the compile
# budget on the device's torch, whose torch.compile may take no recompile_limit (the path that raises
# the process's limit instead: emulated on the CPU only).
# Run from main: END=560 bash bench/measurements/2026-12-07-h100-s58/plan_next_gpu_rest.sh
# Carry [".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#  ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json",
#  ".carry/shared/reference/cases/appearance_extractor.pt", ".carry/shared/reference/cases/motion_extractor.pt",
#  ".carry/shared/reference/cases/putback.pt", ".whl"] (the cases and the wheels fit 64 MiB; the other cases don't).
set -u
. bench/measurements/device_call.sh
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
stamp preamble 0
timeout 120 python3 -m pytest -q -n 0 -p no:cacheprovider tests/test_compile_budget.py > $OUT/compile_budget.log 2>&1
stamp "compile budget (CPU tests, the device's torch)" $?; tail -1 $OUT/compile_budget.log
python3 -c "import inspect, torch; print('torch.compile takes recompile_limit:', 'recompile_limit' in inspect.signature(torch.compile).parameters)"
for f in tests/test_cuda_streams.py tests/test_cuda_graphs.py tests/test_putback.py::test_triton_parity_and_agreement_with_torch tests/test_appearance_extractor.py \
    tests/test_motion_extractor.py tests/test_cuda_start.py tests/test_live_hubert_windows.py tests/test_live_stitch.py \
    tests/test_hardening_models.py tests/test_hubert_torch.py tests/test_audio_hubert.py tests/test_batch_local.py \
    tests/test_conditions.py tests/test_motion_stitch.py tests/test_hardening_soak.py tests/test_aot_packages.py; do
  [ $(left) -lt 40 ] && { echo "not reached: $f"; continue; }
  name=$(basename ${f%%::*} .py)
  gpu_pytest $(( $(left) - 10 )) $f > $OUT/$name.log 2>&1
  stamp $name $?; tail -1 $OUT/$name.log
  grep -hE "FAILED|ERROR|SKIPPED|^E  " $OUT/$name.log | cut -c1-200 | head -8
done
# Session 59: does a graph-tree engine's VRAM come back when engine and models are dropped?
if [ $(left) -gt 90 ]; then
  timeout $(( $(left) - 5 )) env PYTHONPATH=$PWD:$PYTHONPATH python3 bench/measurements/2026-12-08-cpu-s59/graph_tree_unload_probe.py \
    > $OUT/graph_tree_unload.log 2>&1
  stamp "graph-tree unload probe" $?; tail -2 $OUT/graph_tree_unload.log
fi
