#!/usr/bin/env bash
# Device call 2 (right after c1, the machine warm): the 3B at T=8192 beside Hugging Face (eager),
# the 1.1B at 1M dilated (host peak), the 1.1B at 4M refused.
R=$(pwd); T0=$(date +%s)
[ -x .gpu/lcc ] || (cd .gpu && tar xJf b/lcc.tar.xz)
L=$R/.gpu/lcc; mkdir -p $OUT/logs; free -g | head -2
left() { echo $(( 570 - ($(date +%s) - T0) )); }
if [ ! -s .gpu/x3b/llama_3b.onnx ]; then python3 .gpu/b/anchors/hf_llama.py --preset 3b export .gpu/x3b > $OUT/logs/export3b.log 2>&1; fi
( python3 .gpu/b/anchors/hf_llama.py export /tmp/l > $OUT/logs/export1b.log 2>&1 ) &
EXP=$!
python3 .gpu/b/anchors/hf_llama.py --preset 3b train --T 8192 2>&1 | tail -2 | tee $OUT/logs/hf3b_8k.log
timeout 200 $L train .gpu/x3b/llama_3b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 12 > $OUT/logs/lcc3b_8k.log 2>&1; echo "lcc 3b 8k rc=$?"
grep -vE "^step +[0-9]+ " $OUT/logs/lcc3b_8k.log | tail -25; grep -E "^step" $OUT/logs/lcc3b_8k.log | tail -4
wait $EXP; tail -2 $OUT/logs/export1b.log
timeout $(left) $L train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len 1048576 --steps 3 > $OUT/logs/l1b_1m.log 2>&1; echo "lcc 1b 1m rc=$?"
tail -30 $OUT/logs/l1b_1m.log
[ $(left) -gt 40 ] && timeout $(left) $L train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len 4194304 --steps 3 2>&1 | tail -5 | cut -c1-600
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
