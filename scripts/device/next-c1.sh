#!/usr/bin/env bash
# Planned device call 1 of the next session (scripts/device/pack.sh first, then
# copy this into .gpu/b): the 3B export starts in the background into .gpu/x3b
# (it persists while the machine stays warm, for next-c2.sh); the GPU tests of
# the work no device has run yet (sliding windows on both tiers and the scalar
# kernels, the zoo with its windowed attention; head dims padded to 64 or 128,
# and 256 on tier 1), then every GPU test binary; the window's speed against
# dense causal at 64K, head dims 96 and 256 beside sdpa_flash.
R=$(pwd); T0=$(date +%s)
cd .gpu && tar xJf a/tests.tar.xz && tar xJf b/lcc.tar.xz && cd "$R"
L=$R/.gpu/lcc; mkdir -p $OUT/logs .gpu/x3b
left() { echo $(( 560 - ($(date +%s) - T0) )); }
( t=$(date +%s); python3 .gpu/b/anchors/hf_llama.py --preset 3b export .gpu/x3b > $OUT/logs/export3b.log 2>&1; echo "export3b rc=$? $(( $(date +%s)-t )) s" >> $OUT/logs/export3b.log ) &
gt() { # gt BINARY DIR PATTERN LIMIT: one test binary, counted
  (cd $2 && LCC_REQUIRE_GPU=1 timeout $4 $R/.gpu/$1.test -test.run "$3" -test.v > $OUT/logs/$1.log 2>&1; echo "$1 rc=$? pass=$(grep -c -- '--- PASS' $OUT/logs/$1.log) fail=$(grep -c -- '--- FAIL' $OUT/logs/$1.log) skip=$(grep -c -- '--- SKIP' $OUT/logs/$1.log) at $(( $(date +%s)-T0 )) s")
  grep -E -- "--- FAIL|panic" $OUT/logs/$1.log | head -8
}
gt codegen_cuda_flash codegen/cuda/flash GPUPrimitives 60
gt perf_flash perf/flash 'GPUWindow|GPUDocs|GPUDense' 150
gt runtime_exec runtime/exec 'GPUFlashWindow|GPUFlashDocs|GPUFamilies|GPUFlashAttention|GPUHostOptimizer' 150
gt train train 'GPUStreamedOptimizer|GPUHostOptimizer' 150
# The window against lcc's own dense causal (issue #24: at least 6x at 64K, W=4096).
for a in "--H 8 --D 128" "--H 16 --Hkv 4 --D 64"; do
  timeout 60 $L bench attention --T 65536 $a --window 4096 > $OUT/logs/win_${a// /}.log 2>&1; echo "bench window 64K $a rc=$?"
  grep -E "^  |vs one" $OUT/logs/win_${a// /}.log | cut -c1-200
done
# Tier 2's grouped-query backward split by query head (flash.Desc.SplitHeads), off and
# on, beside cuDNN: the 1.1B Llama's layer and GQA 8/2 at 32K; the faster becomes the rule.
for a in "--T 8192 --H 32 --Hkv 4 --D 64" "--T 32768 --H 8 --Hkv 2 --D 128"; do
  timeout 90 $L bench attention $a --tiles "0,0,0,0,0,0,0,0,0,0,2,0;0,0,0,0,0,0,0,0,0,0,2,1" --anchors .gpu/b/anchors > $OUT/logs/split_${a// /}.log 2>&1; echo "bench split $a rc=$?"
  grep -vE "^anchor:" $OUT/logs/split_${a// /}.log | tail -8 | cut -c1-220
done
# Head dims 96 and 256 beside sdpa_flash at 16K (issue #24), and the bidirectional shape.
for a in "--T 16384 --H 8 --D 96" "--T 16384 --H 8 --D 256" "--T 4096 --H 16 --D 64 --B 4 --no-causal"; do
  timeout 90 $L bench attention $a --anchors .gpu/b/anchors > $OUT/logs/hd_${a// /}.log 2>&1; echo "bench $a rc=$?"
  grep -vE "^anchor:" $OUT/logs/hd_${a// /}.log | tail -8 | cut -c1-220
done
# Test models with sliding windows and head dims 96 and 256 (scripts/export_hf.py; copy
# $OUT/hf/* into testdata/hf and test them on the CPU), and lcc check on the GPU on them.
mkdir -p $OUT/hf
timeout 120 python3 scripts/export_hf.py --testdata $OUT/hf mistral_window_sdpa mistral_window_eager qwen2_window gemma_d256 phi3_d96 > $OUT/logs/export_hf.log 2>&1; echo "export_hf rc=$?"; grep -E "^(ok|FAILED)" $OUT/logs/export_hf.log
for m in $OUT/hf/*.onnx; do
  for p in fp32 bf16; do
    timeout 60 $L check $m --device=cuda --precision=$p --grads --batch 2 --seq-len 320 --require-attention --ref ${m%.onnx}.ref.safetensors > $OUT/logs/check_$(basename $m .onnx)_$p.log 2>&1; echo "check $(basename $m) $p rc=$?"
    grep -iE "attn kern|window|worst|pass|fail" $OUT/logs/check_$(basename $m .onnx)_$p.log | head -6 | cut -c1-200
  done
done
echo "targeted done at $(( $(date +%s)-T0 )) s"
# Every GPU test, what time is left, the longest binaries last.
for b in runtime_cuda codegen_cuda_flash perf_flash runtime_exec runtime_comm_nccl runtime_comm_devlocal train_runner train_eval train; do
  d=$(awk -v n=$b '$1==n {print $2}' .gpu/tests.txt); [ -n "$d" ] || continue
  l=$(left); [ $l -gt 20 ] || { echo "no time left for $b"; continue; }
  (cd $d && LCC_REQUIRE_GPU=1 timeout $l $R/.gpu/$b.test -test.run GPU -test.v > $OUT/logs/all_$b.log 2>&1; echo "all $b rc=$? pass=$(grep -c -- '--- PASS' $OUT/logs/all_$b.log) fail=$(grep -c -- '--- FAIL' $OUT/logs/all_$b.log)")
  grep -E -- "--- FAIL" $OUT/logs/all_$b.log | head -5
done
tail -1 $OUT/logs/export3b.log
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
