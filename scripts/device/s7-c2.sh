#!/usr/bin/env bash
# s7 call 2: the paired exchange split by columns (Q: every warp adds half its columns) beside
# the row split (P) and base; then the flash GPU tests and compute-sanitizer on Q's kernels.
R=$(pwd); T0=$(date +%s); mkdir -p $OUT/logs /tmp/bins; tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
S1="--T 8192 --H 24 --Hkv 8 --D 128"; S2="--T 8192 --H 32 --Hkv 4 --D 64"; S3="--T 32768 --H 8 --D 128"; S5="--T 8192 --H 8 --D 128"
for s in "$S1" "$S2" "$S3" "$S5"; do
  for b in base P Q; do
    echo "== $b $s"; timeout 60 /tmp/bins/lcc-$b bench attention $s --warmup 2 --iters 7 2>&1 | grep "tier 2 fwd"
  done
done
echo "t=$(( $(date +%s)-T0 ))"
cd perf/flash && LCC_REQUIRE_GPU=1 timeout 220 /tmp/bins/perf_flash.test -test.run 'TestGPUDense|TestGPUDocs|TestGPUWindow|TestGPUDilated' -test.v > $OUT/logs/pflash.log 2>&1; echo "pflash rc=$? pass $(grep -c -- '--- PASS' $OUT/logs/pflash.log) fail $(grep -c -- '--- FAIL' $OUT/logs/pflash.log)"; cd $R
grep -B2 -A8 -- "--- FAIL" $OUT/logs/pflash.log | head -30
echo "t=$(( $(date +%s)-T0 ))"
cd perf/flash; for tool in racecheck synccheck; do
  timeout 80 compute-sanitizer --tool $tool /tmp/bins/perf_flash.test -test.run 'TestGPUDense/(causal-d128-ragged|full-d64-ragged-gqa|causal-d128-gqa)/tier2' > $OUT/logs/san-$tool.log 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^ok|^PASS|^FAIL' $OUT/logs/san-$tool.log | tr '\n' ' ')"
done; cd $R
echo "t=$(( $(date +%s)-T0 ))"
