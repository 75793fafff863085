#!/usr/bin/env bash
# Device call 3 of the session of 2026-12-02 13:00 UTC, after the importer transposes
# folded Linear weights in place (ImportOptions.Consume): the 3B export, then the 3B
# Llama at T=524288 and T=131072, dilated, 3 steps each, no --host-memory-budget,
# host phases traced (LCC_TRACE_HOST): issue #26's planned against measured host peaks.
R=$(pwd); T0=$(date +%s)
cd .gpu && tar xJf b/lcc.tar.xz && cd "$R"
L=$R/.gpu/lcc; mkdir -p $OUT/logs /tmp/x3b
t=$(date +%s); python3 .gpu/b/anchors/hf_llama.py --preset 3b export /tmp/x3b > $OUT/logs/export3b.log 2>&1; echo "export3b rc=$? $(( $(date +%s)-t )) s"
for T in 524288 131072; do
  LCC_TRACE_HOST=1 timeout $(( 595 - ($(date +%s) - T0) )) $L train /tmp/x3b/llama_3b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len $T --batch 1 --steps 3 --progress-every 1 > $OUT/logs/l3b_$T.log 2>&1; echo "lcc 3b $T rc=$? at $(( $(date +%s)-T0 )) s"
  grep -vE "^step +[0-9]+/" $OUT/logs/l3b_$T.log | cut -c1-300 | head -40; grep -E "^step +[0-9]+/" $OUT/logs/l3b_$T.log | tail -3 | cut -c1-200
done
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
