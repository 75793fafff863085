#!/usr/bin/env bash
# Needs the tree of 668df09 (revert its revert first): the device was refused when it was written.
# s7 call 4: tier 1 with the heads-fastest launch order (T; the fused backward at head dim 256
# only) beside base (cb39818): flash GPU tests on T, head dim 256 benches, T beside the anchors.
R=$(pwd); T0=$(date +%s); mkdir -p $OUT/logs /tmp/bins; tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
cd perf/flash && LCC_REQUIRE_GPU=1 timeout 200 /tmp/bins/perf_flash.test -test.run 'TestGPUDense|TestGPUDocs|TestGPUWindow|TestGPUDilated' -test.v > $OUT/logs/pflash.log 2>&1; echo "pflash rc=$? pass $(grep -c -- '--- PASS' $OUT/logs/pflash.log) fail $(grep -c -- '--- FAIL' $OUT/logs/pflash.log)"; cd $R
grep -B2 -A8 -- "--- FAIL" $OUT/logs/pflash.log | head -20
for s in "--T 16384 --H 8 --D 256" "--T 8192 --H 16 --Hkv 4 --D 256"; do
  for b in base T; do echo "== $b $s"; timeout 60 /tmp/bins/lcc-$b bench attention $s --warmup 2 --iters 7 2>&1 | grep "tier 1 fwd"; done
done
echo "== anchors"; timeout 80 /tmp/bins/lcc-T bench attention --T 16384 --H 8 --D 256 --warmup 2 --iters 7 --anchors .gpu/b/anchors 2>&1 | tail -9
echo "t=$(( $(date +%s)-T0 ))"
