#!/usr/bin/env bash
# s5 call 4: D's kernels under compute-sanitizer, the executor's flash tests, lcc check on the
# d128 model, and the 1.1B at 8K beside Hugging Face eager and --compile in one command.
R=$(pwd); T0=$(date +%s); mkdir -p $OUT/logs /tmp/bins /tmp/l; tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
( python3 .gpu/b/anchors/hf_llama.py export /tmp/l > $OUT/logs/export1b.log 2>&1; echo "export1b rc=$?" >> $OUT/logs/export1b.log ) &
E1=$!
# Measurement only (their dQ is wrong): the adds as red.add.u32, red.add.f32 (at the u64 words'
# addresses) and red.add.v2.f32 (half the lanes), beside D's red.add.u64.
S1="--T 8192 --H 24 --Hkv 8 --D 128"; S2="--T 8192 --H 32 --Hkv 4 --D 64"; S3="--T 32768 --H 8 --D 128"
for s in "$S1" "$S2" "$S3"; do for b in D u32 f32; do
  echo "== $b $s"; /tmp/bins/lcc-$b bench attention $s --warmup 2 --iters 5 2>&1 | grep "tier 2" | cut -c1-170
done; done
cd perf/flash; for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool /tmp/bins/perf_flash.test -test.run 'TestGPUDense/(causal-d128-ragged|full-d64-ragged-gqa|causal-d128-gqa)/tier2' > $OUT/logs/san-$tool.log 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^ok|^PASS|^FAIL' $OUT/logs/san-$tool.log | tr '\n' ' ')"
done; cd $R
cd runtime/exec && LCC_REQUIRE_GPU=1 timeout 120 /tmp/bins/exec.test -test.run 'TestGPUFlash|TestGPUDilated|TestGPURing|TestGPUSharded' -test.v > $OUT/logs/exec.log 2>&1; echo "exec rc=$? pass $(grep -c -- '--- PASS' $OUT/logs/exec.log) fail $(grep -c -- '--- FAIL' $OUT/logs/exec.log)"; cd $R
for p in fp32 bf16; do /tmp/bins/lcc-D check testdata/hf/hf_llama_gqa_d128_sdpa.onnx --ref testdata/hf/hf_llama_gqa_d128_sdpa.ref.safetensors --grads --device=cuda --precision=$p 2>&1 | tail -2; echo "check $p rc=$?"; done
echo "t=$(( $(date +%s)-T0 ))"
wait $E1; tail -1 $OUT/logs/export1b.log
timeout 100 python3 .gpu/b/anchors/hf_llama.py train --T 8192 --steps 10 > $OUT/logs/hf1b.log 2>&1; echo "hf 1b rc=$?"; tail -1 $OUT/logs/hf1b.log | cut -c1-300
timeout 80 /tmp/bins/lcc-D train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 12 --progress-every 1 > $OUT/logs/l1b_D.log 2>&1; echo "lcc-D 1b rc=$? t=$(( $(date +%s)-T0 ))"
grep -E "^step +median|^trained" $OUT/logs/l1b_D.log | cut -c1-200
timeout 150 python3 .gpu/b/anchors/hf_llama.py train --T 8192 --steps 10 --compile > $OUT/logs/hf1bc.log 2>&1; echo "hf 1b compile rc=$?"; tail -1 $OUT/logs/hf1bc.log | cut -c1-300
echo "t=$(( $(date +%s)-T0 ))"
