#!/usr/bin/env bash
# s9 call 2: compute-sanitizer over the memory-bound kernels of 9ea50cd (rms_norm in registers,
# rms_norm_grad's next-row loads and 8-column sums, the gradient norm) and synccheck over the
# tier-2 flash kernels (only memcheck and racecheck had run on them), and the flash views under
# memcheck and racecheck. Pack: lcc, exec.test, perf_flash.test (main).
mkdir -p /tmp/bins && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
for tool in memcheck racecheck synccheck initcheck; do
	( cd runtime/exec && LCC_REQUIRE_GPU=1 timeout 100 compute-sanitizer --tool $tool /tmp/bins/exec.test \
		-test.run 'TestGPURMSNormGrad|TestGPUResidualNorms|TestGPUOptimizerMatchesCPU' > "$OUT/logs/san-norm-$tool.log" 2>&1
	  echo "norm $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^ok|^PASS|^FAIL' "$OUT/logs/san-norm-$tool.log" | tr '\n' ' ')" )
done
elapsed
sanitize synccheck
# The flash views (4ed4b68): memcheck and racecheck on TestGPUViews' kernels.
for tool in memcheck racecheck; do
	( cd perf/flash && LCC_REQUIRE_GPU=1 timeout 100 compute-sanitizer --tool $tool /tmp/bins/perf_flash.test \
		-test.run 'TestGPUViews/causal-d64-gqa' > "$OUT/logs/san-views-$tool.log" 2>&1
	  echo "views $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^ok|^PASS|^FAIL' "$OUT/logs/san-views-$tool.log" | tr '\n' ' ')" )
done
elapsed
