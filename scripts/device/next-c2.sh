#!/usr/bin/env bash
# Planned device call 2 (warm after next-c1.sh, its 3B export in .gpu/x3b): the 3B Llama
# at T=524288 dilated, 3 steps, with no --host-memory-budget, so that lcc train plans
# again under the measured host (it must print "planning again under
# --host-memory-budget=...") and reports the measured host peak (VmHWM) beside the plan.
R=$(pwd); T0=$(date +%s); L=$R/.gpu/lcc; mkdir -p $OUT/logs; free -g | head -2
ls -la .gpu/x3b | head -5
timeout 570 $L train .gpu/x3b/llama_3b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len 524288 --batch 1 --steps 3 --progress-every 1 > $OUT/logs/l3b_512k.log 2>&1; echo "lcc 3b 512k rc=$? at $(( $(date +%s)-T0 )) s"
grep -vE "^step +[0-9]+/" $OUT/logs/l3b_512k.log | tail -16 | cut -c1-500; grep -E "^step +[0-9]+/" $OUT/logs/l3b_512k.log | tail -3
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
