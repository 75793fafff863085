#!/usr/bin/env bash
# s9 call 1 (next session; not yet run): main's sink-concats (Hugging Face's rotate_half RoPE
# as one kernel a tensor and direction) and rms_norm_grad's block count (lccP: branch
# norm-grad-p2048) on the GPU. Pack into .gpu/b/bins.tar.xz: base (main before sink-concats,
# 751616a), lcc (main), lccP (the branch), exec.test and train.test (main), with the anchors in
# .gpu/b/anchors; run with carry [".gpu/b"].
mkdir -p /tmp/bins /tmp/l /tmp/f && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
export_bg hf_llama.py export /tmp/l; E1=$!
export_bg flagship.py export /tmp/f; E2=$!
gpu_tests runtime/exec exec.test exec 100 'TestGPUFlagshipViews|TestGPUFusedKernels|TestGPUResidualNorms|TestGPUElementwiseTails|TestGPUFamilies|TestGPURMSNormGrad'
gpu_tests train train.test train 90 'TestGPUCUDAGraph$|TestGPUFusedStep|TestGPUCheckBF16Flash'
# rotate_half models against PyTorch's gradients, on the GPU, fp32 and bf16.
for m in hf_llama_gqa_sdpa hf_llama_gqa_eager hf_llama_gqa_d128_sdpa; do for p in fp32 bf16; do
	timeout 60 /tmp/bins/lcc check testdata/hf/$m.onnx --ref testdata/hf/$m.ref.safetensors --grads --device=cuda --precision=$p > "$OUT/logs/check-$m-$p.log" 2>&1
	echo "check $m $p rc=$? $(grep -E '^max_rel_err' "$OUT/logs/check-$m-$p.log")"
done; done
elapsed
wait $E1; tail -1 "$OUT/logs/export-hf_llama.py.log"
for b in base lcc base lcc; do
	timeout 60 /tmp/bins/$b train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 12 > "$OUT/logs/l1b-$b.log" 2>&1; echo "$b 1b rc=$?"; grep -E "median|^trained" "$OUT/logs/l1b-$b.log" | cut -c1-160
done
timeout 80 python3 .gpu/b/anchors/hf_llama.py train --T 8192 --steps 10 > "$OUT/logs/hf1b.log" 2>&1; echo "hf 1b rc=$?"; tail -1 "$OUT/logs/hf1b.log" | cut -c1-200
elapsed
wait $E2; tail -1 "$OUT/logs/export-flagship.py.log"
F="train /tmp/f/flagship.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 4096 --batch 1"
for b in lcc lccP lcc lccP; do
	timeout 60 /tmp/bins/$b $F --steps 30 > "$OUT/logs/f4k-$b.log" 2>&1; echo "$b flagship 4k rc=$?"; grep -E "median" "$OUT/logs/f4k-$b.log" | cut -c1-100
done
for b in lcc lccP; do timeout 60 /tmp/bins/$b $F --steps 12 --profile > "$OUT/logs/prof-$b.log" 2>&1; grep -E "^  (rms_norm_grad|rms_norm_grad.scale|concat|slice|split|transpose) " "$OUT/logs/prof-$b.log" | tail -6; done
# The exported flagship's step as lcc plans it: which copies the views left (graph and launch plan).
timeout 60 /tmp/bins/lcc compile /tmp/f/flagship.onnx --precision bf16 --seq-len 4096 -o /tmp/fc > "$OUT/logs/fc.log" 2>&1; echo "compile rc=$?"
mkdir -p "$OUT/fc" && cp /tmp/fc/graph.lcc /tmp/fc/launch_plan.json /tmp/fc/report.json "$OUT/fc/"
left=$(( 560 - ($(date +%s) - T0) ))
[ $left -gt 100 ] && { timeout $left python3 .gpu/b/anchors/flagship.py train --T 4096 --attn dense --ce naive --steps 20 --compile > "$OUT/logs/pf4kc.log" 2>&1; echo "compile rc=$?"; tail -1 "$OUT/logs/pf4kc.log" | cut -c1-200; }
elapsed
