#!/usr/bin/env bash
# s7 call 3: bars of issue #24 never measured beside their anchors: bidirectional B=4, and
# head dims 96 and 256 at T=16K (lcc at cb39818, packed by scripts/device/pack.sh).
R=$(pwd); T0=$(date +%s); cd .gpu && tar xJf b/lcc.tar.xz && cd "$R"; L=$R/.gpu/lcc
for s in "--T 4096 --H 16 --D 64 --B 4 --no-causal" "--T 16384 --H 16 --D 96" "--T 16384 --H 8 --D 256"; do
  [ $(( $(date +%s)-T0 )) -gt 250 ] && break
  echo "== $s"; timeout 100 $L bench attention $s --warmup 2 --iters 7 --anchors .gpu/b/anchors 2>&1 | tail -9
done
echo "t=$(( $(date +%s)-T0 ))"
