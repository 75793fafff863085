#!/usr/bin/env bash
# s7 call 1: tier 2's backward with the paired dQ exchange (P) beside base (4bcc286): flash GPU
# tests and compute-sanitizer on P's kernels, the benches, the window bar, P beside the anchors.
mkdir -p /tmp/bins && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
S1="--T 8192 --H 24 --Hkv 8 --D 128"; S2="--T 8192 --H 32 --Hkv 4 --D 64"; S3="--T 32768 --H 8 --D 128"; S5="--T 8192 --H 8 --D 128"
flash_tests 200 'TestGPUDense|TestGPUDocs|TestGPUWindow|TestGPUDilated'; elapsed
bench_ab "tier 2" "base P" "$S1" "$S2" "$S3" "$S5"; elapsed
echo "== window"; timeout 90 /tmp/bins/lcc-P bench attention --T 65536 --H 8 --D 128 --window 4096 --warmup 2 --iters 5 2>&1 | tail -8; elapsed
sanitize racecheck synccheck memcheck; elapsed
for s in "$S1" "$S3" "$S2"; do
  [ $(( $(date +%s)-T0 )) -gt 520 ] && break
  echo "== anchors $s"; timeout 90 /tmp/bins/lcc-P bench attention $s --warmup 2 --iters 7 --anchors .gpu/b/anchors 2>&1 | tail -7
done
elapsed
