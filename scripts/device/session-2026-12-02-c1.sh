#!/usr/bin/env bash
# Device call 1 (2026-12-02, 03:05 UTC): 3B export in the background into .gpu/x3b (kept while warm),
# every GPU test with LCC_REQUIRE_GPU=1, then the flagship at T=4096.
R=$(pwd); T0=$(date +%s)
cd .gpu && tar xJf a/tests.tar.xz && tar xJf b/lcc.tar.xz && cd "$R"
L=$R/.gpu/lcc; mkdir -p $OUT/logs
nproc; free -g | head -2; ulimit -l
( t=$(date +%s); python3 .gpu/b/anchors/hf_llama.py --preset 3b export .gpu/x3b > $OUT/logs/export3b.log 2>&1; echo "export3b rc=$? $(( $(date +%s)-t )) s" >> $OUT/logs/export3b.log ) &
EXP=$!
left() { echo $(( 540 - ($(date +%s) - T0) )); }
run() { local tag=$1 name=$2 dir=$3 pat=$4 lim=$5; [ "$lim" -gt 20 ] || { echo "$tag: no time left"; return; }
  local t=$(date +%s)
  (cd $dir && LCC_REQUIRE_GPU=1 timeout $lim $R/.gpu/$name.test -test.run "$pat" -test.v 2>&1) > $OUT/logs/$tag.log; local rc=$?
  echo "$tag rc=$rc pass=$(grep -c -- '--- PASS' $OUT/logs/$tag.log) skip=$(grep -c -- '--- SKIP' $OUT/logs/$tag.log) fail=$(grep -c -- '--- FAIL' $OUT/logs/$tag.log) $(( $(date +%s)-t ))s"
  grep -E -- "--- (FAIL|SKIP)|panic" $OUT/logs/$tag.log | head -8; }
for x in "train train train" "exec runtime_exec runtime/exec" "cuda runtime_cuda runtime/cuda" "flash perf_flash perf/flash" "nccl runtime_comm_nccl runtime/comm/nccl" "devlocal runtime_comm_devlocal runtime/comm/devlocal" "runner train_runner train/runner" "eval train_eval train/eval"; do
  set -- $x; run all_$1 $2 $3 GPU $(left); done
if [ $(left) -gt 100 ]; then
python3 .gpu/b/anchors/flagship.py export /tmp/f > $OUT/logs/export.log 2>&1
$L train /tmp/f/flagship.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 4096 --batch 1 --steps 30 2>&1 | tail -6 | tee $OUT/logs/flag4k.log
fi
while kill -0 $EXP 2>/dev/null && [ $(left) -gt 5 ]; do sleep 2; done
tail -3 $OUT/logs/export3b.log; ls -la .gpu/x3b 2>/dev/null
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
