#!/usr/bin/env bash
# s9 call 2: compute-sanitizer over the memory-bound kernels of 9ea50cd (rms_norm in registers,
# rms_norm_grad's next-row loads and 8-column sums, the gradient norm) and synccheck over the
# tier-2 flash kernels (only memcheck and racecheck had run on them). Same pack as s9-c1, plus
# perf_flash.test.
[ -x /tmp/bins/lcc ] || { mkdir -p /tmp/bins && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz; }
. scripts/device/lib.sh
for tool in memcheck racecheck synccheck initcheck; do
	( cd runtime/exec && LCC_REQUIRE_GPU=1 timeout 100 compute-sanitizer --tool $tool /tmp/bins/exec.test \
		-test.run 'TestGPURMSNormGrad|TestGPUResidualNorms|TestGPUOptimizerMatchesCPU' > "$OUT/logs/san-norm-$tool.log" 2>&1
	  echo "norm $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^ok|^PASS|^FAIL' "$OUT/logs/san-norm-$tool.log" | tr '\n' ' ')" )
done
elapsed
sanitize synccheck
elapsed
