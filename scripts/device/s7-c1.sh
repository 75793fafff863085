#!/usr/bin/env bash
# s7 call 1: tier 2's backward with the paired dQ exchange (P) beside base (4bcc286): flash GPU
# tests and compute-sanitizer on P's kernels, the benches, the window bar, P beside the anchors.
R=$(pwd); T0=$(date +%s); mkdir -p $OUT/logs /tmp/bins; tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
cd perf/flash && LCC_REQUIRE_GPU=1 timeout 200 /tmp/bins/perf_flash.test -test.run 'TestGPUDense|TestGPUDocs|TestGPUWindow|TestGPUDilated' -test.v > $OUT/logs/pflash.log 2>&1; echo "pflash rc=$? pass $(grep -c -- '--- PASS' $OUT/logs/pflash.log) fail $(grep -c -- '--- FAIL' $OUT/logs/pflash.log)"; cd $R
grep -B2 -A8 -- "--- FAIL" $OUT/logs/pflash.log | head -30
echo "t=$(( $(date +%s)-T0 ))"
S1="--T 8192 --H 24 --Hkv 8 --D 128"; S2="--T 8192 --H 32 --Hkv 4 --D 64"; S3="--T 32768 --H 8 --D 128"; S5="--T 8192 --H 8 --D 128"
for s in "$S1" "$S2" "$S3" "$S5"; do
  for b in base P; do
    echo "== $b $s"; timeout 60 /tmp/bins/lcc-$b bench attention $s --warmup 2 --iters 7 2>&1 | grep "tier 2"
  done
done
echo "t=$(( $(date +%s)-T0 ))"
echo "== window"; timeout 90 /tmp/bins/lcc-P bench attention --T 65536 --H 8 --D 128 --window 4096 --warmup 2 --iters 5 2>&1 | tail -8
echo "t=$(( $(date +%s)-T0 ))"
cd perf/flash; for tool in racecheck synccheck memcheck; do
  timeout 80 compute-sanitizer --tool $tool /tmp/bins/perf_flash.test -test.run 'TestGPUDense/(causal-d128-ragged|full-d64-ragged-gqa|causal-d128-gqa)/tier2' > $OUT/logs/san-$tool.log 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^ok|^PASS|^FAIL' $OUT/logs/san-$tool.log | tr '\n' ' ')"
done; cd $R
echo "t=$(( $(date +%s)-T0 ))"
for s in "$S1" "$S3" "$S2"; do
  [ $(( $(date +%s)-T0 )) -gt 520 ] && break
  echo "== anchors $s"; timeout 90 /tmp/bins/lcc-P bench attention $s --warmup 2 --iters 7 --anchors .gpu/b/anchors 2>&1 | tail -7
done
echo "t=$(( $(date +%s)-T0 ))"
