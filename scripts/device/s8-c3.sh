#!/usr/bin/env bash
# s8 call 3: where the steps go now (--profile, the roofline's families): the flagship at T=4096
# beside flagship.py eager and --compile in the same command, and the 1.1B Llama at T=8192.
mkdir -p /tmp/bins /tmp/l /tmp/f && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
( python3 .gpu/b/anchors/hf_llama.py export /tmp/l > "$OUT/logs/export1b.log" 2>&1; echo "export1b rc=$?" >> "$OUT/logs/export1b.log" ) &
E1=$!
python3 .gpu/b/anchors/flagship.py export /tmp/f > "$OUT/logs/exportf.log" 2>&1; echo "export flagship rc=$?"; elapsed
L="/tmp/bins/lcc train /tmp/f/flagship.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 4096 --batch 1"
timeout 60 $L --steps 30 > "$OUT/logs/f4k.log" 2>&1; echo "lcc flagship 4k rc=$?"; grep -E "median|^trained" "$OUT/logs/f4k.log" | cut -c1-200
timeout 60 python3 .gpu/b/anchors/flagship.py train --T 4096 --attn dense --ce naive --steps 20 > "$OUT/logs/pf4k.log" 2>&1; echo "eager rc=$?"; tail -1 "$OUT/logs/pf4k.log" | cut -c1-250
timeout 150 python3 .gpu/b/anchors/flagship.py train --T 4096 --attn dense --ce naive --steps 20 --compile > "$OUT/logs/pf4kc.log" 2>&1; echo "compile rc=$?"; tail -1 "$OUT/logs/pf4kc.log" | cut -c1-250
timeout 60 $L --steps 30 > "$OUT/logs/f4k2.log" 2>&1; echo "lcc flagship 4k again rc=$?"; grep -E "median" "$OUT/logs/f4k2.log" | cut -c1-200
timeout 60 $L --steps 12 --profile > "$OUT/logs/f4kp.log" 2>&1; echo "profile rc=$?"; elapsed
wait $E1; tail -1 "$OUT/logs/export1b.log"
timeout 90 /tmp/bins/lcc train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 6 --profile > "$OUT/logs/l1bp.log" 2>&1; echo "1b profile rc=$?"; elapsed
