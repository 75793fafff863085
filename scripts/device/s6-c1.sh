#!/usr/bin/env bash
# For the next session's first device call (prepared 2026-12-02 18:10 UTC), after
# `bash scripts/device/pack.sh`: every GPU test binary but train's (each under 150 s, so the
# call stays under 600 s), then train's GPU tests in s6-c2.sh with the 1.1B at 1M.
R=$(pwd); T0=$(date +%s)
cd .gpu && tar xJf a/tests.tar.xz && cd "$R"
mkdir -p $OUT/logs
while read -r bin pkg; do
  [ "$bin" = train ] && continue
  left=$(( 580 - ($(date +%s) - T0) )); [ $left -lt 30 ] && { echo "$bin: not run (time)"; continue; }
  ( cd "$pkg" && LCC_REQUIRE_GPU=1 timeout $(( left < 150 ? left : 150 )) "$R/.gpu/$bin.test" -test.run GPU -test.v > "$OUT/logs/$bin.log" 2>&1; echo "$bin rc=$? pass $(grep -c -- '--- PASS' "$OUT/logs/$bin.log") fail $(grep -c -- '--- FAIL' "$OUT/logs/$bin.log")" )
done < .gpu/tests.txt
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
