#!/usr/bin/env bash
# s5 call 3: D = base + dK after dQ + heads-fastest launch order (fwd, bwd) beside base and
# the anchors; flash GPU tests on D; the 1.1B Llama at 8K beside Hugging Face.
R=$(pwd); T0=$(date +%s); mkdir -p $OUT/logs /tmp/bins /tmp/l; tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
( python3 .gpu/b/anchors/hf_llama.py export /tmp/l > $OUT/logs/export1b.log 2>&1; echo "export1b rc=$?" >> $OUT/logs/export1b.log ) &
E1=$!
S1="--T 8192 --H 24 --Hkv 8 --D 128"; S2="--T 8192 --H 32 --Hkv 4 --D 64"; S3="--T 32768 --H 8 --D 128"; S5="--T 8192 --H 8 --D 128"
for s in "$S1" "$S2" "$S3" "$S5"; do for b in base D; do
  echo "== $b $s"; /tmp/bins/lcc-$b bench attention $s --warmup 2 --iters 7 2>&1 | grep "tier 2"
done; done
echo "t=$(( $(date +%s)-T0 ))"
cd perf/flash && LCC_REQUIRE_GPU=1 timeout 200 /tmp/bins/perf_flash.test -test.run 'TestGPUDense|TestGPUDocs|TestGPUWindow|TestGPUDilated' -test.v > $OUT/logs/pflash.log 2>&1; echo "pflash rc=$? pass $(grep -c -- '--- PASS' $OUT/logs/pflash.log) fail $(grep -c -- '--- FAIL' $OUT/logs/pflash.log)"; cd $R
grep -B2 -A8 -- "--- FAIL" $OUT/logs/pflash.log | head -30
echo "t=$(( $(date +%s)-T0 ))"
wait $E1; tail -1 $OUT/logs/export1b.log
timeout 100 python3 .gpu/b/anchors/hf_llama.py train --T 8192 --steps 10 > $OUT/logs/hf1b.log 2>&1; echo "hf 1b rc=$?"; tail -2 $OUT/logs/hf1b.log | cut -c1-300
timeout 100 /tmp/bins/lcc-D train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 12 --progress-every 1 > $OUT/logs/l1b_D.log 2>&1; echo "lcc-D 1b rc=$? t=$(( $(date +%s)-T0 ))"
grep -vE "^step +[0-9]+/" $OUT/logs/l1b_D.log | cut -c1-220 | tail -8; grep -E "^step +[0-9]+/" $OUT/logs/l1b_D.log | tail -2 | cut -c1-200
echo "t=$(( $(date +%s)-T0 ))"
for s in "$S3" "$S2"; do /tmp/bins/lcc-D bench attention $s --warmup 2 --iters 5 --anchors .gpu/b/anchors 2>&1 | tail -8 | grep -v efficient; done
echo "t=$(( $(date +%s)-T0 ))"
