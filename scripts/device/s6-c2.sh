#!/usr/bin/env bash
# The next session's second device call: train's GPU tests, then the 1.1B Llama at
# T=1048576 dilated with the host traced (issue #26: host planned vs measured after the
# importer's in-place transposes; 40K tok/s bar).
R=$(pwd); T0=$(date +%s)
cd .gpu && tar xJf b/lcc.tar.xz && tar xJf a/tests.tar.xz && cd "$R"
L=$R/.gpu/lcc; mkdir -p $OUT/logs /tmp/l
( python3 .gpu/b/anchors/hf_llama.py export /tmp/l > $OUT/logs/export1b.log 2>&1; echo "export1b rc=$?" >> $OUT/logs/export1b.log ) &
E1=$!
( cd train && LCC_REQUIRE_GPU=1 timeout 200 "$R/.gpu/train.test" -test.run GPU -test.v > $OUT/logs/train.log 2>&1; echo "train rc=$? pass $(grep -c -- '--- PASS' $OUT/logs/train.log) fail $(grep -c -- '--- FAIL' $OUT/logs/train.log)" )
wait $E1; tail -1 $OUT/logs/export1b.log
LCC_TRACE_HOST=1 timeout $(( 590 - ($(date +%s) - T0) )) $L train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len 1048576 --steps 3 --progress-every 1 > $OUT/logs/l1b_1m.log 2>&1; echo "lcc 1b 1M rc=$? at $(( $(date +%s)-T0 )) s"
grep -vE "^step +[0-9]+/" $OUT/logs/l1b_1m.log | cut -c1-300 | tail -25
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
