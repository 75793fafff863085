#!/usr/bin/env bash
# Device call 2 (right after c1, on the warm machine, /tmp/x3b still there): the 3B
# Llama at T=131072 and T=524288, dilated, 3 steps each, no --host-memory-budget, host
# phases traced: issue #26's planned against measured host peaks.
R=$(pwd); T0=$(date +%s)
L=$R/.gpu/lcc; mkdir -p $OUT/logs
[ -x $L ] || (cd .gpu && tar xJf b/lcc.tar.xz)
ls -la /tmp/x3b | head -5
for T in 131072 524288; do
  LCC_TRACE_HOST=1 timeout $(( 595 - ($(date +%s) - T0) )) $L train /tmp/x3b/llama_3b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len $T --batch 1 --steps 3 --progress-every 1 > $OUT/logs/l3b_$T.log 2>&1; echo "lcc 3b $T rc=$? at $(( $(date +%s)-T0 )) s"
  grep -vE "^step +[0-9]+/" $OUT/logs/l3b_$T.log | cut -c1-300 | head -50; grep -E "^step +[0-9]+/" $OUT/logs/l3b_$T.log | tail -3 | cut -c1-200
done
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
