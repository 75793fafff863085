#!/usr/bin/env bash
# s8 call 2: main with tier 2's split-float dQ sum (lcc) beside the anchors at issue #24's five
# dense shapes and LongNet dilated at 1M (beside base, the kernels before it); the executor's
# flash tests and lcc check on the d128 model; the 1.1B Llama at 8K beside Hugging Face eager
# and --compile, in one command.
mkdir -p /tmp/bins /tmp/l && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
( python3 .gpu/b/anchors/hf_llama.py export /tmp/l > "$OUT/logs/export1b.log" 2>&1; echo "export1b rc=$?" >> "$OUT/logs/export1b.log" ) &
E1=$!
for s in "--T 32768 --H 8 --D 128" "--T 8192 --H 8 --D 128" "--T 32768 --H 8 --Hkv 2 --D 128" "--T 131072 --H 16 --D 64" "--T 8192 --H 32 --Hkv 4 --D 64"; do
	echo "== $s"; timeout 90 /tmp/bins/lcc bench attention $s --warmup 2 --iters 5 --anchors .gpu/b/anchors 2>&1 | tail -8 | grep -v efficient
done; elapsed
echo "== dilated base"; timeout 60 /tmp/bins/lcc-base bench dilated 2>&1 | tail -3
echo "== dilated lcc"; timeout 90 /tmp/bins/lcc bench dilated --anchors .gpu/b/anchors 2>&1 | tail -6; elapsed
( cd runtime/exec && LCC_REQUIRE_GPU=1 timeout 100 /tmp/bins/exec.test -test.run 'TestGPUFlash|TestGPUDilated|TestGPURing|TestGPUSharded' -test.v > "$OUT/logs/exec.log" 2>&1
  echo "exec rc=$? pass $(grep -c -- '--- PASS' "$OUT/logs/exec.log") fail $(grep -c -- '--- FAIL' "$OUT/logs/exec.log")" )
grep -B2 -A8 -- "--- FAIL" "$OUT/logs/exec.log" | head -20
for p in fp32 bf16; do timeout 60 /tmp/bins/lcc check testdata/hf/hf_llama_gqa_d128_sdpa.onnx --ref testdata/hf/hf_llama_gqa_d128_sdpa.ref.safetensors --grads --device=cuda --precision=$p 2>&1 | tail -2; echo "check $p rc=$?"; done
elapsed
wait $E1; tail -1 "$OUT/logs/export1b.log"; elapsed
timeout 80 python3 .gpu/b/anchors/hf_llama.py train --T 8192 --steps 10 > "$OUT/logs/hf1b.log" 2>&1; echo "hf 1b rc=$?"; tail -1 "$OUT/logs/hf1b.log" | cut -c1-300
timeout 80 /tmp/bins/lcc train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 12 --progress-every 1 > "$OUT/logs/l1b.log" 2>&1; echo "lcc 1b rc=$?"
grep -E "^step +median|^trained|median" "$OUT/logs/l1b.log" | cut -c1-200; elapsed
left=$(( 590 - ($(date +%s) - T0) ))
[ $left -gt 60 ] && { timeout $left python3 .gpu/b/anchors/hf_llama.py train --T 8192 --steps 10 --compile > "$OUT/logs/hf1bc.log" 2>&1; echo "hf 1b compile rc=$?"; tail -1 "$OUT/logs/hf1bc.log" | cut -c1-300; }
elapsed
