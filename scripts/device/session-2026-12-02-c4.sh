#!/usr/bin/env bash
# Device call 4 (warm), run twice: the 3B at T=524288 dilated under --host-memory-budget=120GiB, then 122GiB.
R=$(pwd); T0=$(date +%s); L=$R/.gpu/lcc; mkdir -p $OUT/logs; free -g | head -2
T=524288
timeout 400 $L train .gpu/x3b/llama_3b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len $T --batch 1 --steps 3 --progress-every 1 --host-memory-budget=${BUDGET:-120GiB} > $OUT/logs/lcc3b_$T.log 2>&1; echo "lcc 3b $T rc=$? at $(( $(date +%s)-T0 )) s"
grep -vE "^step +[0-9]+/" $OUT/logs/lcc3b_$T.log | tail -14 | cut -c1-600; grep -E "^step +[0-9]+/" $OUT/logs/lcc3b_$T.log | tail -3
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
