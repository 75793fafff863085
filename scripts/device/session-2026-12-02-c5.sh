#!/usr/bin/env bash
# Device call 5: host-plan fixes. GPU tests touched (fused kernels, optimizers with zero moments),
# the 1.1B at 1M (host planned vs measured), the 3B at 524288 dilated (export in the same call).
R=$(pwd); T0=$(date +%s)
cd .gpu && tar xJf a/tests.tar.xz && tar xJf b/lcc.tar.xz && cd "$R"
L=$R/.gpu/lcc; mkdir -p $OUT/logs
left() { echo $(( 505 - ($(date +%s) - T0) )); }
( t=$(date +%s); python3 .gpu/b/anchors/hf_llama.py --preset 3b export /tmp/l3 > $OUT/logs/export3b.log 2>&1; echo "export3b rc=$? $(( $(date +%s)-t )) s" >> $OUT/logs/export3b.log ) &
E3=$!
( python3 .gpu/b/anchors/hf_llama.py export /tmp/l > $OUT/logs/export1b.log 2>&1 ) &
E1=$!
(cd runtime/exec && LCC_REQUIRE_GPU=1 timeout 90 $R/.gpu/runtime_exec.test -test.run 'GPUFusedKernels|GPUHostOptimizer|GPUOptimizer|GPUTrainingStep' -test.v > $OUT/logs/exec.log 2>&1; echo "exec rc=$? pass=$(grep -c -- '--- PASS' $OUT/logs/exec.log) fail=$(grep -c -- '--- FAIL' $OUT/logs/exec.log)")
grep -E -- "--- FAIL" $OUT/logs/exec.log | head -5
(cd train && LCC_REQUIRE_GPU=1 timeout 90 $R/.gpu/train.test -test.run 'GPUHostOptimizer|GPUResident|GPUFusedStep|GPUCUDAGraph$|GPUTrajectory' -test.v > $OUT/logs/train.log 2>&1; echo "train rc=$? pass=$(grep -c -- '--- PASS' $OUT/logs/train.log) fail=$(grep -c -- '--- FAIL' $OUT/logs/train.log)")
grep -E -- "--- FAIL" $OUT/logs/train.log | head -5
echo "tests done at $(( $(date +%s)-T0 )) s"
wait $E1; tail -1 $OUT/logs/export1b.log
timeout $(( $(left) - 5 )) $L train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len 1048576 --steps 3 --progress-every 1 > $OUT/logs/l1b_1m.log 2>&1; echo "lcc 1b 1m rc=$? at $(( $(date +%s)-T0 )) s"
grep -E "^(memory|host|state|step +[0-9]|trained)" $OUT/logs/l1b_1m.log | cut -c1-300
wait $E3; tail -1 $OUT/logs/export3b.log; echo "3b export done at $(( $(date +%s)-T0 )) s"; free -g | head -2
timeout $(( $(left) )) $L train /tmp/l3/llama_3b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len 524288 --batch 1 --steps 3 --progress-every 1 --host-memory-budget=118GiB > $OUT/logs/l3b_512k.log 2>&1; echo "lcc 3b 512k rc=$? at $(( $(date +%s)-T0 )) s"
grep -vE "^step +[0-9]+/" $OUT/logs/l3b_512k.log | tail -12 | cut -c1-500; grep -E "^step +[0-9]+/" $OUT/logs/l3b_512k.log | tail -3
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
