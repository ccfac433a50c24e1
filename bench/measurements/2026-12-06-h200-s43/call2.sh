#!/bin/bash
# Session 43, call 2, on call 1's machine (about 420 s; a fresh machine pays the preamble again):
# 1. bench_live's first frame and one stream (JPEG), the H200's single-stream goals;
# 2. a py-spy sample of the CLI in a new process, the example (where its time goes, thread by thread);
# 3. the CLI on a 60-s clip, this tree against it without the down blocks' kernel (reversed in a copy).
# One archive, rewritten after each step. Carry as call 1.
set -u
START=$(date +%s)
OUT=$(cd "$OUT" && pwd)
HERE=$PWD
END=${END:-420}
O=/tmp/o2; mkdir -p $O/profiles
left() { echo $((END - $(date +%s) + START)); }
pack() { tar -C $O -czf $OUT/call2.tgz . ; }
stamp() { echo "$1 rc $2 s $(( $(date +%s) - START ))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NEED_HUBERT=1 . bench/measurements/2026-12-04-h200-s19/preamble.sh > /dev/null
rm -rf /tmp/nopool && cp -r $HERE /tmp/nopool && (cd /tmp/nopool && git apply -R --include=ditto_core/models/blocks.py \
  --include=ditto_core/models/down_pool_triton.py $HERE/bench/measurements/2026-12-06-h100-s41/down_pool.patch) || exit 1
echo "preamble s $(( $(date +%s) - START ))"
timeout 150 python3 -m bench.bench_live --hubert $H --parts first_frame one_stream --out $O/live_one.json > $O/live_one.log 2>&1
stamp "live one stream" $?; grep -E "first_frame|one_stream|chunk" $O/live_one.log | cut -c1-300 | head -6; pack
timeout 60 python3 -m bench.bench_time_to_video --models /tmp/models --hubert $H --image $E/portrait.jpg \
  --audio $E/speech_24k_mono.wav --clips example --warmups cli --repeats 1 --profile --py-spy /tmp/site/bin/py-spy \
  --profile-dir $O/profiles --out $O/ttv_profiled.json > $O/ttv_profiled.log 2>&1
stamp profiled $?
for f in $O/profiles/*.speedscope.json; do
  [ -f "$f" ] && python3 -m bench.profile_timeline $f --slice 0.1 --depth 3 --top 15 > ${f%.speedscope.json}.txt 2>&1; gzip -f $f
done
pack
for tree in main nopool; do
  dir=$HERE; [ $tree = nopool ] && dir=/tmp/nopool
  [ $(left) -lt 70 ] && break
  (cd $dir && PYTHONPATH=$dir:/tmp/site timeout $(left) python3 -m bench.bench_time_to_video --models /tmp/models \
    --hubert $H --image $HERE/$E/portrait.jpg --audio $HERE/$E/speech_24k_mono.wav --clips 60s --warmups cli \
    --repeats 2 --out $O/ttv_60s_$tree.json > $O/ttv_60s_$tree.log 2>&1)
  stamp "60s $tree" $?; grep -E "^60s/cli" $O/ttv_60s_$tree.log | cut -c1-200
  pack
done
