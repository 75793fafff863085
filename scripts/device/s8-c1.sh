#!/usr/bin/env bash
# s8 call 1: tier 2's dQ sum as split-float pairs (S: red.global.add.v4.f32, two elements an
# operation) beside base (174afdd) and no adds (N, a timing only); S's flash GPU tests and
# sanitizers; then unlisted shapes for the window and head-dim-96 bars (base, with anchors).
mkdir -p /tmp/bins && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
S1="--T 8192 --H 24 --Hkv 8 --D 128"; S2="--T 8192 --H 32 --Hkv 4 --D 64"; S3="--T 32768 --H 8 --D 128"; S5="--T 8192 --H 8 --D 128"
bench_ab "fwd+bwd" "base S" "$S1" "$S2" "$S3" "$S5"; elapsed
flash_tests 150 'TestGPUDense|TestGPUDocs|TestGPUWindow|TestGPUDilated'; elapsed
sanitize memcheck racecheck; elapsed
