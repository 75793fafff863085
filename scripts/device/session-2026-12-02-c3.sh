#!/usr/bin/env bash
# Device call 3 (warm, the 3B export of c1 kept): the 3B Llama at T=131072 and T=524288, dilated, 3 steps each.
R=$(pwd); T0=$(date +%s); L=$R/.gpu/lcc; mkdir -p $OUT/logs; free -g | head -2
for T in 131072 524288; do
  left=$(( 580 - ($(date +%s) - T0) ))
  timeout $left $L train .gpu/x3b/llama_3b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len $T --batch 1 --steps 3 --progress-every 1 > $OUT/logs/lcc3b_$T.log 2>&1; echo "lcc 3b $T rc=$? at $(( $(date +%s)-T0 )) s"
  grep -vE "^step +[0-9]+/" $OUT/logs/lcc3b_$T.log | tail -14 | cut -c1-400; grep -E "^step +[0-9]+/" $OUT/logs/lcc3b_$T.log | tail -3
done
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
