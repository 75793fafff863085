#!/usr/bin/env bash
# Needs the tree of 668df09 (revert its revert first) for lcc-T and perf_flash.test.
# s7 call 4: tier 1 with the heads-fastest launch order (T; the fused backward at head dim 256
# only) beside base (cb39818): flash GPU tests on T, head dim 256 benches, T beside the anchors.
mkdir -p /tmp/bins && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
flash_tests 150 'TestGPUDense|TestGPUWindow'
bench_ab "tier 1 fwd" "base T" "--T 16384 --H 8 --D 256" "--T 8192 --H 16 --Hkv 4 --D 256"
echo "== anchors"; timeout 80 /tmp/bins/lcc-T bench attention --T 16384 --H 8 --D 256 --warmup 2 --iters 7 --anchors .gpu/b/anchors 2>&1 | tail -9
elapsed
