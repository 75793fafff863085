# Helpers the per-call device scripts source (from the repository root on the device, after
# unpacking .gpu/b/bins.tar.xz into /tmp/bins). Each prints one summary line a step and keeps
# its log under $OUT/logs.
mkdir -p "$OUT/logs" /tmp/bins
T0=${T0:-$(date +%s)}
R=$(pwd)

# AB_SHAPES are the four attention shapes the A/B calls time: the 3B Llama's layer, the 1.1B's,
# 32K and 8K with 8 heads at head dim 128.
AB_SHAPES=("--T 8192 --H 24 --Hkv 8 --D 128" "--T 8192 --H 32 --Hkv 4 --D 64" "--T 32768 --H 8 --D 128" "--T 8192 --H 8 --D 128")

# elapsed prints the seconds since the call began.
elapsed() { echo "t=$(( $(date +%s) - T0 ))"; }

# gpu_tests DIR BIN LOG TIMEOUT RUN runs /tmp/bins/BIN's GPU tests matching RUN in package
# folder DIR, logs them to $OUT/logs/LOG.log, then shows any failure.
gpu_tests() {
	local log="$OUT/logs/$3.log"
	( cd "$1" && LCC_REQUIRE_GPU=1 timeout "$4" "/tmp/bins/$2" -test.run "$5" -test.v > "$log" 2>&1
	  echo "$3 rc=$? pass $(grep -c -- '--- PASS' "$log") fail $(grep -c -- '--- FAIL' "$log")" )
	grep -B2 -A8 -- "--- FAIL" "$log" | head -30
}

# flash_tests TIMEOUT RUN runs perf/flash's GPU tests matching RUN.
flash_tests() { gpu_tests perf/flash perf_flash.test pflash "$1" "$2"; }

# export_bg SCRIPT ARGS... runs an anchor's export (.gpu/b/anchors/SCRIPT) in the background,
# logged to $OUT/logs/export-SCRIPT.log; wait for it with `wait $!` or `wait`.
export_bg() {
	local log="$OUT/logs/export-$1.log"
	( python3 ".gpu/b/anchors/$1" "${@:2}" > "$log" 2>&1; echo "export $1 rc=$?" >> "$log" ) &
}

# sanitize TOOL... runs compute-sanitizer's tools over three tier-2 flash tests.
sanitize() {
	for tool in "$@"; do
		( cd perf/flash && timeout 80 compute-sanitizer --tool "$tool" /tmp/bins/perf_flash.test \
			-test.run 'TestGPUDense/(causal-d128-ragged|full-d64-ragged-gqa|causal-d128-gqa)/tier2' > "$OUT/logs/san-$tool.log" 2>&1
		  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^ok|^PASS|^FAIL' "$OUT/logs/san-$tool.log" | tr '\n' ' ')" )
	done
}

# bench_ab PATTERN "BIN..." SHAPE... times each shape with each /tmp/bins/lcc-BIN, one after
# another in this command, and prints the lines matching PATTERN.
bench_ab() {
	local pat=$1 bins=$2 s b
	shift 2
	for s in "$@"; do
		for b in $bins; do
			echo "== $b $s"; timeout 60 /tmp/bins/lcc-$b bench attention $s --warmup 2 --iters 7 2>&1 | grep "$pat"
		done
	done
}
