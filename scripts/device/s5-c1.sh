#!/usr/bin/env bash
# s5 call 1: the tier-2 backward, base vs dK-after-dQ (A) vs no dQ adds (measurement), and ncu.
R=$(pwd); T0=$(date +%s); mkdir -p $OUT/logs /tmp/bins; tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
export LCC_CACHE_DIR=/tmp/lcccache
S1="--T 8192 --H 24 --Hkv 8 --D 128"; S2="--T 8192 --H 32 --Hkv 4 --D 64"; S3="--T 32768 --H 8 --D 128"; S4="--T 131072 --H 16 --D 64"
for s in "$S1" "$S2" "$S3"; do
  for b in base A nored; do
    echo "== $b $s"; /tmp/bins/lcc-$b bench attention $s --warmup 2 --iters 7 2>&1 | tail -6
  done
done
echo "== A stages sweep"; /tmp/bins/lcc-A bench attention $S1 --warmup 2 --iters 7 --tiles "0,0,0,0,0,0,2;0,0,0,0,0,0,3;0,0,0,0,0,0,4" 2>&1 | tail -8
echo "== A S4"; /tmp/bins/lcc-A bench attention $S4 --warmup 1 --iters 3 2>&1 | tail -6
echo "== base S4"; /tmp/bins/lcc-base bench attention $S4 --warmup 1 --iters 3 2>&1 | tail -6
echo "== anchors S1"; /tmp/bins/lcc-A bench attention $S1 --warmup 2 --iters 7 --anchors .gpu/b/anchors 2>&1 | tail -12
echo "t=$(( $(date +%s)-T0 ))"
for b in base A; do
 timeout 150 ncu --clock-control none -k regex:dkdvdq -c 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis /tmp/bins/lcc-$b bench attention $S1 --warmup 0 --iters 1 > $OUT/logs/ncu-$b.txt 2>&1
 echo "ncu $b rc=$?"; grep -E "Duration|Throughput|Pipe|Stall|Issue|Warp Cycles|Executed Ipc|Shared" $OUT/logs/ncu-$b.txt | head -40
done
echo "t=$(( $(date +%s)-T0 ))"
