#!/usr/bin/env bash
# Device call 1 of the session of 2026-12-02 13:00 UTC: the 3B export in the
# background beside the host optimizer's GPU tests (the CPU update now named
# explicitly, the default update auto); then the 3B Llama at T=8192 beside Hugging
# Face's own code in the same command (issue #26: 1.2x), with the host phases traced
# (LCC_TRACE_HOST) and a --profile run for where the step goes.
R=$(pwd); T0=$(date +%s)
cd .gpu && tar xJf b/lcc.tar.xz && tar xJf a/tests.tar.xz && cd "$R"
L=$R/.gpu/lcc; mkdir -p $OUT/logs /tmp/x3b
( t=$(date +%s); python3 .gpu/b/anchors/hf_llama.py --preset 3b export /tmp/x3b > $OUT/logs/export3b.log 2>&1; echo "export3b rc=$? $(( $(date +%s)-t )) s" >> $OUT/logs/export3b.log ) &
E3=$!
( cd train && LCC_REQUIRE_GPU=1 timeout 240 ../.gpu/train.test -test.run 'GPUHostOptimizer|GPUStreamedOptimizer|GPUResident' -test.v > $OUT/logs/train_tests.log 2>&1; echo "train tests rc=$?" >> $OUT/logs/train_tests.log )
grep -E "^(--- |ok|FAIL|PASS|train tests)" $OUT/logs/train_tests.log | head -30
wait $E3; tail -1 $OUT/logs/export3b.log; free -g | head -2; echo "at $(( $(date +%s)-T0 )) s"
timeout 150 python3 .gpu/b/anchors/hf_llama.py --preset 3b train --T 8192 --steps 10 > $OUT/logs/hf3b.log 2>&1; echo "hf 3b rc=$? at $(( $(date +%s)-T0 )) s"; tail -2 $OUT/logs/hf3b.log | cut -c1-400
LCC_TRACE_HOST=1 timeout 150 $L train /tmp/x3b/llama_3b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 12 --progress-every 1 > $OUT/logs/l3b_8k.log 2>&1; echo "lcc 3b 8k rc=$? at $(( $(date +%s)-T0 )) s"
grep -vE "^step +[0-9]+/" $OUT/logs/l3b_8k.log | cut -c1-260 | head -60; grep -E "^step +[0-9]+/" $OUT/logs/l3b_8k.log | tail -3 | cut -c1-200
timeout $(( 590 - ($(date +%s) - T0) )) $L train /tmp/x3b/llama_3b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 4 --profile > $OUT/logs/l3b_8k_prof.log 2>&1; echo "lcc 3b 8k profile rc=$? at $(( $(date +%s)-T0 )) s"
grep -vE "^step +[0-9]+/" $OUT/logs/l3b_8k_prof.log | tail -45 | cut -c1-200
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
