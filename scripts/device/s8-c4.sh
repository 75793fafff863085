#!/usr/bin/env bash
# s8 call 4: the memory-bound kernels (N: RMSNorm's row in registers, its backward's next row
# under this row's sums and its column sums in 8-column blocks, warp-shuffle block sums, the
# gradient norm's sums) beside base: their GPU tests, then the flagship at T=4096 (base, N,
# base, N, eager, --compile, N --profile) and the 1.1B Llama at 8K (base, N, eager), one command.
mkdir -p /tmp/bins /tmp/l /tmp/f && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
( python3 .gpu/b/anchors/hf_llama.py export /tmp/l > "$OUT/logs/export1b.log" 2>&1; echo "export1b rc=$?" >> "$OUT/logs/export1b.log" ) &
E1=$!
( python3 .gpu/b/anchors/flagship.py export /tmp/f > "$OUT/logs/exportf.log" 2>&1; echo "exportf rc=$?" >> "$OUT/logs/exportf.log" ) &
E2=$!
( cd runtime/exec && LCC_REQUIRE_GPU=1 timeout 100 /tmp/bins/exec.test -test.run 'TestGPURMSNormGrad|TestGPUResidualNorms|TestGPUFamilies|TestGPUOptimizerMatchesCPU|TestGPUHostOptimizerMatchesResident|TestGPUFlagshipViews|TestGPUTrainingStep|TestGPUFusedKernels|TestGPUMemboundSmall|TestGPUElementwiseTails' -test.v > "$OUT/logs/exec.log" 2>&1
  echo "exec rc=$? pass $(grep -c -- '--- PASS' "$OUT/logs/exec.log") fail $(grep -c -- '--- FAIL' "$OUT/logs/exec.log")" )
grep -B2 -A10 -- "--- FAIL" "$OUT/logs/exec.log" | head -30
( cd train && LCC_REQUIRE_GPU=1 timeout 90 /tmp/bins/train.test -test.run 'TestGPUCUDAGraph$|TestGPUHostOptimizer|TestGPUStreamedOptimizer|TestGPUResident|TestGPUFusedStep|TestGPURoofline' -test.v > "$OUT/logs/train.log" 2>&1
  echo "train rc=$? pass $(grep -c -- '--- PASS' "$OUT/logs/train.log") fail $(grep -c -- '--- FAIL' "$OUT/logs/train.log")" )
grep -B2 -A10 -- "--- FAIL" "$OUT/logs/train.log" | head -30
elapsed
wait $E2; tail -1 "$OUT/logs/exportf.log"
F="train /tmp/f/flagship.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 4096 --batch 1"
for b in base lcc base lcc; do
	timeout 60 /tmp/bins/$b $F --steps 30 > "$OUT/logs/f4k-$b.log" 2>&1; echo "$b flagship 4k rc=$?"; grep -E "median|^trained" "$OUT/logs/f4k-$b.log" | cut -c1-160
done
timeout 60 python3 .gpu/b/anchors/flagship.py train --T 4096 --attn dense --ce naive --steps 20 > "$OUT/logs/pf4k.log" 2>&1; echo "eager rc=$?"; tail -1 "$OUT/logs/pf4k.log" | cut -c1-200
timeout 150 python3 .gpu/b/anchors/flagship.py train --T 4096 --attn dense --ce naive --steps 20 --compile > "$OUT/logs/pf4kc.log" 2>&1; echo "compile rc=$?"; tail -1 "$OUT/logs/pf4kc.log" | cut -c1-200
timeout 60 /tmp/bins/lcc $F --steps 12 --profile > "$OUT/logs/f4kp.log" 2>&1; echo "profile rc=$?"; grep -E "rms_norm|optim.norm|below 80" "$OUT/logs/f4kp.log" | tail -6
elapsed
wait $E1; tail -1 "$OUT/logs/export1b.log"
for b in base lcc; do
	timeout 60 /tmp/bins/$b train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 12 > "$OUT/logs/l1b-$b.log" 2>&1; echo "$b 1b rc=$?"; grep -E "median|^trained" "$OUT/logs/l1b-$b.log" | cut -c1-160
done
left=$(( 430 - ($(date +%s) - T0) ))
[ $left -gt 45 ] && { timeout $left python3 .gpu/b/anchors/hf_llama.py train --T 8192 --steps 10 > "$OUT/logs/hf1b.log" 2>&1; echo "hf 1b rc=$?"; tail -1 "$OUT/logs/hf1b.log" | cut -c1-200; }
elapsed
