#!/usr/bin/env bash
# s9 call 4: the exported flagship with its qkv gradient as one concat (main) beside base
# (b1c54bf), and the 1.1B Llama. Pack: base, lcc, exec.test; anchors; carry [".gpu/b"].
mkdir -p /tmp/bins /tmp/f /tmp/l && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
export_bg flagship.py export /tmp/f
export_bg hf_llama.py export /tmp/l
gpu_tests runtime/exec exec.test exec 80 'TestGPUFlagshipViews|TestGPUFusedKernels|TestGPUTrainingStep'
for m in hf_gpt2 hf_llama_gqa_sdpa; do
	timeout 60 /tmp/bins/lcc check testdata/hf/$m.onnx --ref testdata/hf/$m.ref.safetensors --grads --device=cuda --precision=bf16 > "$OUT/logs/check-$m.log" 2>&1
	echo "check $m bf16 rc=$? $(grep -E '^max_rel_err' "$OUT/logs/check-$m.log" | tr '\n' ' ')"
done
elapsed
wait
F="train /tmp/f/flagship.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 4096 --batch 1"
for b in base lcc base lcc; do
	timeout 60 /tmp/bins/$b $F --steps 30 > "$OUT/logs/f4k-$b.log" 2>&1; echo "$b flagship 4k rc=$? $(grep -E '^step +median' "$OUT/logs/f4k-$b.log" | cut -c1-50) $(grep -E '^trained' "$OUT/logs/f4k-$b.log" | cut -c50-160)"
done
timeout 60 /tmp/bins/lcc $F --steps 12 --profile > "$OUT/logs/prof-lcc.log" 2>&1; grep -E "^  (concat|slice|split|elementwise|matmul) " "$OUT/logs/prof-lcc.log" | head -8
timeout 60 python3 .gpu/b/anchors/flagship.py train --T 4096 --attn dense --ce naive --steps 20 --compile > "$OUT/logs/pf4kc.log" 2>&1; echo "compile anchor rc=$? $(tail -1 "$OUT/logs/pf4kc.log" | cut -c1-150)"
elapsed
for b in base lcc; do
	timeout 60 /tmp/bins/$b train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 12 > "$OUT/logs/l1b-$b.log" 2>&1; echo "$b 1b rc=$? $(grep -E '^step +median' "$OUT/logs/l1b-$b.log" | cut -c1-50)"
done
left=$(( 570 - ($(date +%s) - T0) ))
[ $left -gt 60 ] && { timeout $left python3 .gpu/b/anchors/hf_llama.py train --T 8192 --steps 10 > "$OUT/logs/hf1b.log" 2>&1; echo "hf 1b rc=$? $(tail -1 "$OUT/logs/hf1b.log" | cut -c1-150)"; }
elapsed
