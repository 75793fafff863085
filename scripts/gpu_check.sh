#!/usr/bin/env bash
# Runs lcc's GPU acceptance checks on a CUDA machine and prints a summary table.
# Expects what `make gpu-tests` builds with CGO_ENABLED=0: .gpu/lcc, one test binary per
# GPU package, and .gpu/tests.txt listing them ("NAME PACKAGE_DIR" per line).
# Logs go to ${OUT:-/tmp/lcc-gpu}. CHECKS_ONLY=1 runs only `lcc check --grads` on every
# testdata model in fp32 and bf16 (one summary line per model and precision).
set -u
# A GPU test that would skip here (no GPU, NVRTC, NCCL or cuBLASLt found) fails instead.
export LCC_REQUIRE_GPU=${LCC_REQUIRE_GPU:-1}
out=${OUT:-/tmp/lcc-gpu}
mkdir -p "$out"
root=$(pwd)
lcc=$root/.gpu/lcc
summary=()
run() { # name, command...
	local name=$1; shift
	local start=$(date +%s%N)
	"$@" </dev/null >"$out/$name.log" 2>&1
	local rc=$?
	local t=$(( ($(date +%s%N) - start) / 1000000 ))
	local last=$(grep -E "max_rel_err|^(ok|PASS|FAIL)|ERROR SUMMARY|RACECHECK SUMMARY|^trained|differ" "$out/$name.log" | tail -1)
	summary+=("$(printf '%-44s rc=%-3s %6dms  %s' "$name" "$rc" "$t" "$last")")
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt"
checks_only=${CHECKS_ONLY:-0}
if [ ! -x "$lcc" ] || { [ "$checks_only" != 1 ] && [ ! -s .gpu/tests.txt ]; }; then
	echo "gpu_check: no .gpu/tests.txt or .gpu/lcc: run make gpu-tests first" >&2
	exit 1
fi
if [ "$checks_only" != 1 ]; then
	while read -r name pkg; do
		run "${name}_gpu_tests" bash -c "cd '$pkg' && '$root/.gpu/$name.test' -test.run GPU -test.v -test.timeout 8m"
	done <.gpu/tests.txt
fi
for prec in fp32 bf16; do
	for m in gpt_mini:gpt_mini llama_mini:llama_mini llama_mini_op23:llama_mini llama_mini_extdata:llama_mini attn_mha:attn_mha_dense gpt_mini_loss:gpt_mini_loss; do
		model=${m%%:*}; ref=${m##*:}
		run "check_${model}_${prec}" "$lcc" check "testdata/onnx/$model.onnx" --ref "testdata/ref/$ref.ref.safetensors" --grads --device=cuda --precision=$prec
	done
	for m in gpt2 llama_gqa_eager llama_gqa_sdpa bert llama_gqa_eager_long llama_gqa_sdpa_long llama_gqa_d128_sdpa; do
		run "check_hf_${m}_${prec}" "$lcc" check "testdata/hf/hf_$m.onnx" --ref "testdata/hf/hf_$m.ref.safetensors" --grads --device=cuda --precision=$prec
	done
	run "check_attn_mha_dilated_${prec}" "$lcc" check testdata/onnx/attn_mha.onnx --ref testdata/ref/attn_mha_dilated_paper.ref.safetensors --grads --device=cuda --precision=$prec --attention=dilated --segments=8,16,32 --dilations=1,2,4
	# The exports of testdata/trajectory; a _noopt export shares its model's reference.
	for m in gemma gemma_noopt gpt_neox gpt_neox_noopt qwen2_d64; do
		run "check_trajectory_${m}_${prec}" "$lcc" check "testdata/trajectory/$m.onnx" --ref "testdata/trajectory/${m%_noopt}.ref.safetensors" --grads --device=cuda --precision=$prec
	done
done
# qwen2_d64 (head dim 64, peaked softmax) on the CUDA-core attention kernels too: the bf16
# emulation models the tensor-core kernels' roundings only where they run.
run check_trajectory_qwen2_d64_bf16_scalar "$lcc" check testdata/trajectory/qwen2_d64.onnx --ref testdata/trajectory/qwen2_d64.ref.safetensors --grads --device=cuda --precision=bf16 --attention-kernels=scalar
if [ "$checks_only" = 1 ]; then
	printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
	exit 0
fi
# Two runs of one check must compute the same bits, every gradient included (in bf16
# the head-dim-128 model's attention runs on the tensor-core kernels).
d128=testdata/hf/hf_llama_gqa_d128_sdpa
for prec in fp32 bf16; do
	for i in 1 2; do
		run "repro_d128_${prec}_$i" "$lcc" check $d128.onnx --ref $d128.ref.safetensors --grads --device=cuda --precision=$prec --outputs "$out/repro_$prec.$i.safetensors"
	done
	run "repro_d128_${prec}_bitwise" cmp "$out/repro_$prec.1.safetensors" "$out/repro_$prec.2.safetensors"
done
run train_gpt_mini_cuda "$lcc" train testdata/onnx/gpt_mini.onnx --device=cuda --data=synthetic:copy --seq-len 64 --batch 8 --steps 300 --lr 3e-3 --seed 1 --progress-every 100
run train_gpt_mini_cuda_bf16 "$lcc" train testdata/onnx/gpt_mini.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 64 --batch 8 --steps 300 --lr 3e-3 --seed 1 --progress-every 100
if command -v compute-sanitizer >/dev/null; then
	run memcheck_llama_mini compute-sanitizer --tool memcheck "$lcc" check testdata/onnx/llama_mini.onnx --ref testdata/ref/llama_mini.ref.safetensors --grads --device=cuda
	run racecheck_llama_mini compute-sanitizer --tool racecheck "$lcc" check testdata/onnx/llama_mini.onnx --ref testdata/ref/llama_mini.ref.safetensors --grads --device=cuda
	run synccheck_llama_mini compute-sanitizer --tool synccheck "$lcc" check testdata/onnx/llama_mini.onnx --ref testdata/ref/llama_mini.ref.safetensors --grads --device=cuda
	for tool in memcheck racecheck synccheck; do
		run ${tool}_d128_bf16 compute-sanitizer --tool $tool "$lcc" check $d128.onnx --ref $d128.ref.safetensors --grads --device=cuda --precision=bf16
	done
fi
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
tar czf "$out/../gpu_logs.tgz" -C "$out" . 2>/dev/null && mv "$out/../gpu_logs.tgz" "$out/" || true
