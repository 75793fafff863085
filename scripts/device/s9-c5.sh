#!/usr/bin/env bash
# s9 call 5: issue #24's flagship bar at T=65536 dense, no checkpoints, beside eager and
# torch.compile in one command. Pack: lcc (main); anchors; carry [".gpu/b"].
mkdir -p /tmp/bins /tmp/f && tar -C /tmp/bins -xJf .gpu/b/bins.tar.xz
. scripts/device/lib.sh
python3 .gpu/b/anchors/flagship.py export /tmp/f > "$OUT/logs/export.log" 2>&1; tail -1 "$OUT/logs/export.log" | cut -c1-100
timeout 150 /tmp/bins/lcc train /tmp/f/flagship.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 65536 --batch 1 --checkpoint=none --steps 10 > "$OUT/logs/f64k.log" 2>&1
echo "lcc 64k rc=$? $(grep -E '^step +median|^memory +planned' "$OUT/logs/f64k.log" | cut -c1-90 | tr '\n' ' ')"
elapsed
timeout 120 python3 .gpu/b/anchors/flagship.py train --T 65536 --attn dense --ce naive --ckpt none --steps 8 > "$OUT/logs/pe64k.log" 2>&1; echo "eager rc=$? $(tail -1 "$OUT/logs/pe64k.log" | cut -c1-170)"
elapsed
left=$(( 560 - ($(date +%s) - T0) ))
[ $left -gt 60 ] && { timeout $left python3 .gpu/b/anchors/flagship.py train --T 65536 --attn dense --ce naive --ckpt none --steps 8 --compile > "$OUT/logs/pc64k.log" 2>&1; echo "compile rc=$? $(tail -1 "$OUT/logs/pc64k.log" | cut -c1-170)"; }
elapsed
