#!/bin/bash
# Prepared in session 44 for the next device call (about 560 s on one GPU, a fresh machine).
# 1. GPU tests of session 44's changes, not yet run on a GPU: ComfyUI's cache emptying beside a
#    recording on another thread (test_cuda_graphs), the mask conv autotuned through its
#    device-wide timing (test_slice_conv_triton), the compiled engine with that kernel
#    (test_triton_kernels), an engine's compile marked for recordings (test_warp_decode: a
#    background compile beside a recording; test_lmdm_sampler);
# Then a question: does a new process's first clip wait for cuDNN's attention plan in HuBERT?
# 2. first_use_probe.py, default and without cuDNN's attention, two processes each, alternating;
# 3. the HuBERT GPU tests on the branch (hubert_sdpa.patch: HuBERT's attention on the flash /
#    memory-efficient kernels), its fp16 / bf16 errors;
# 4. the CLI's time to video, main and the branch alternating, three new processes each.
# Carry [".whl", ".carry/shared/data", ".carry/shared/reference/make_checkpoints.py",
#        ".carry/shared/reference/weights_manifest.json", ".carry/shared/reference/checkpoint_digests_seed0.json",
#        ".carry/shared/reference/cases"] (cases: warp_network.pt only, for test_warp_decode; 64 MiB in all)
# (.whl: av 19.0.2 and soxr for Python 3.12.)
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
END=${END:-560}
O=/tmp/o; mkdir -p $O
D=bench/measurements/2026-12-06-h100-s44
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/plan_next.tgz . ; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m bench.make_hubert_large --out /tmp/hubert/hubert_streaming_fix_kv.onnx > $O/make_hubert.log 2>&1 &
HUBERT_PID=$!
. bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
timeout 280 python3 -m pytest -m gpu -v -n 0 -p no:cacheprovider --no-header -rfE --tb=short tests/test_cuda_graphs.py \
  tests/test_slice_conv_triton.py tests/test_triton_kernels.py tests/test_warp_decode.py tests/test_lmdm_sampler.py \
  > $O/gpu_tests.log 2>&1
echo "gpu tests rc $? s $(( $(date +%s) - START ))"; grep -E "PASSED|FAILED|ERROR" $O/gpu_tests.log | cut -c1-160; pack
for i in 1 2; do for m in default no_cudnn_sdp; do python3 $D/first_use_probe.py $m >> $O/probe.jsonl 2>>$O/probe.err; done; done
python3 - $O/probe.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line); print(d["mode"], d["ms_first_second"], d["hubert_sdpa_kernels"][:3])
PY
pack
rm -rf /tmp/b && mkdir /tmp/b && cp -r ditto_core bench tests nodes __init__.py pyproject.toml /tmp/b/ && (cd /tmp/b && patch -s -p1 < $OLDPWD/$D/hubert_sdpa.patch) || exit 1
(cd /tmp/b && timeout 100 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --no-header -rfE tests/test_hubert_torch.py) > $O/gpu_tests_branch.log 2>&1
echo "branch hubert gpu tests rc $? s $(( $(date +%s) - START ))"; tail -2 $O/gpu_tests_branch.log
wait $HUBERT_PID; echo "hubert written s $(( $(date +%s) - START ))"
ttv() {  # name dir
  (cd $2 && timeout 120 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $OLDPWD/$E/portrait.jpg \
    --audio $OLDPWD/$E/speech_24k_mono.wav --clips example --warmups cli --repeats 3 --out $O/ttv_$1.json > $O/ttv_$1.log 2>&1)
  echo "ttv $1 rc $? s $(( $(date +%s) - START ))"; grep -E "^example/cli (new|warm)" $O/ttv_$1.log | cut -c1-240; pack
}
ttv main $PWD
ttv branch /tmp/b
[ $(left) -gt 130 ] && ttv main2 $PWD
pack
