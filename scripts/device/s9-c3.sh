#!/usr/bin/env bash
# s9 call 3: flash views (4ed4b68) on the GPU. Pack into .gpu/b/bins.tar.xz: base (b1c54bf, main
# before views), lcc (main), lccP (norm-grad-p2048 rebased), exec.test, train.test and
# perf_flash.test (main), anchors in .gpu/b/anchors; carry [".gpu/b"].
mkdir -p /tmp/bins /tmp/f && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
export_bg flagship.py export /tmp/f
flash_tests 90 'TestGPUViews|TestGPUDense/(causal-d128-gqa|full-d64-ragged-gqa|causal-d64)/'
gpu_tests runtime/exec exec.test exec 100 'TestGPUFlagshipViews|TestGPUFusedKernels|TestGPUResidualNorms|TestGPUFamilies|TestGPURMSNormGrad|TestGPUTrainingStep'
# Models against PyTorch's gradients on the GPU: GPT-2 reads q, k, v in place in bf16.
for m in hf_gpt2 hf_llama_gqa_sdpa hf_llama_gqa_d128_sdpa; do for p in fp32 bf16; do
	timeout 60 /tmp/bins/lcc check testdata/hf/$m.onnx --ref testdata/hf/$m.ref.safetensors --grads --device=cuda --precision=$p > "$OUT/logs/check-$m-$p.log" 2>&1
	echo "check $m $p rc=$? $(grep -E '^max_rel_err|tolerance' "$OUT/logs/check-$m-$p.log" | head -2 | tr '\n' ' ')"
done; done
elapsed
wait; tail -1 "$OUT/logs/export-flagship.py.log"
F="train /tmp/f/flagship.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 4096 --batch 1"
for b in base lcc lccP base lcc lccP; do
	timeout 60 /tmp/bins/$b $F --steps 30 > "$OUT/logs/f4k-$b.log" 2>&1; echo "$b flagship 4k rc=$? $(grep -E '^step +median' "$OUT/logs/f4k-$b.log" | cut -c1-60) $(grep -E '^trained' "$OUT/logs/f4k-$b.log" | cut -c1-160)"
done
for b in base lcc; do timeout 60 /tmp/bins/$b $F --steps 12 --profile > "$OUT/logs/prof-$b.log" 2>&1; echo "prof $b"; grep -E "^  (rms_norm_grad|rms_norm_grad.scale|concat|slice|split|attention.flash.dkdvdq|attention.flash.fwd|attention.flash.dqbound|attention.flash.dqconvert) " "$OUT/logs/prof-$b.log" | head -12; done
timeout 60 /tmp/bins/lcc compile /tmp/f/flagship.onnx --precision bf16 --seq-len 4096 -o /tmp/fc > "$OUT/logs/fc.log" 2>&1; echo "compile rc=$?"
mkdir -p "$OUT/fc" && cp /tmp/fc/graph.lcc /tmp/fc/launch_plan.json "$OUT/fc/" 2>/dev/null
elapsed
left=$(( 570 - ($(date +%s) - T0) ))
[ $left -gt 90 ] && { timeout $left python3 .gpu/b/anchors/flagship.py train --T 4096 --attn dense --ce naive --steps 20 --compile > "$OUT/logs/pf4kc.log" 2>&1; echo "compile anchor rc=$?"; tail -1 "$OUT/logs/pf4kc.log" | cut -c1-200; }
elapsed
