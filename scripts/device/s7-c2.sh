#!/usr/bin/env bash
# s7 call 2: the paired exchange split by columns (Q: every warp adds half its columns) beside
# the row split (P) and base; then the flash GPU tests and compute-sanitizer on Q's kernels.
mkdir -p /tmp/bins && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
S1="--T 8192 --H 24 --Hkv 8 --D 128"; S2="--T 8192 --H 32 --Hkv 4 --D 64"; S3="--T 32768 --H 8 --D 128"; S5="--T 8192 --H 8 --D 128"
bench_ab "tier 2 fwd" "base P Q" "$S1" "$S2" "$S3" "$S5"; elapsed
flash_tests 220 'TestGPUDense|TestGPUDocs|TestGPUWindow|TestGPUDilated'; elapsed
sanitize racecheck synccheck; elapsed
