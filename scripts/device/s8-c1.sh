#!/usr/bin/env bash
# s8 call 1: tier 2's dQ sum as split-float pairs (S, branch dq-split-float: red.global.add.v4.f32,
# two elements an operation) beside base (main); S's flash GPU tests and sanitizers; then the
# unlisted shapes of the window and head-dim-96 bars (S, with anchors).
mkdir -p /tmp/bins && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
bench_ab "fwd+bwd" "base S" "${AB_SHAPES[@]}"; elapsed
flash_tests 150 'TestGPUDense|TestGPUDocs|TestGPUWindow|TestGPUDilated'; elapsed
sanitize memcheck racecheck; elapsed
timeout 100 /tmp/bins/lcc-S bench attention --T 131072 --H 16 --Hkv 4 --D 64 --window 4096 --warmup 2 --iters 5 > "$OUT/logs/win.log" 2>&1
echo "win rc=$?"; grep -E "fwd|faster" "$OUT/logs/win.log"; elapsed
timeout 120 /tmp/bins/lcc-S bench attention --T 8192 --H 32 --Hkv 8 --D 96 --warmup 2 --iters 7 --anchors .gpu/b/anchors > "$OUT/logs/d96.log" 2>&1
echo "d96 rc=$?"; tail -12 "$OUT/logs/d96.log"; elapsed
