#!/usr/bin/env bash
# s8 call 1: tier 2's dQ sum as split-float pairs (S: red.global.add.v4.f32, two elements an
# operation) beside base (174afdd) and no adds (N, a timing only); S's flash GPU tests and
# sanitizers; then unlisted shapes for the window and head-dim-96 bars (base, with anchors).
mkdir -p /tmp/bins && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
S1="--T 8192 --H 24 --Hkv 8 --D 128"; S2="--T 8192 --H 32 --Hkv 4 --D 64"; S3="--T 32768 --H 8 --D 128"; S5="--T 8192 --H 8 --D 128"
bench_ab "fwd+bwd" "base N S" "$S1" "$S2" "$S3" "$S5"; elapsed
flash_tests 200 'TestGPUDense|TestGPUDocs|TestGPUWindow|TestGPUDilated'; elapsed
sanitize memcheck racecheck; elapsed
A=.gpu/b/anchors
timeout 100 /tmp/bins/lcc-base bench attention --T 131072 --H 16 --Hkv 4 --D 64 --window 4096 --warmup 2 --iters 5 > $OUT/logs/win.log 2>&1; echo "win rc=$?"; grep -E "fwd|faster" $OUT/logs/win.log; elapsed
timeout 120 /tmp/bins/lcc-base bench attention --T 8192 --H 32 --Hkv 8 --D 96 --warmup 2 --iters 7 --anchors $A > $OUT/logs/d96.log 2>&1; echo "d96 rc=$?"; grep -vE "^\s*$" $OUT/logs/d96.log | tail -12; elapsed
