#!/usr/bin/env bash
# Device call 4 of 2026-12-02 (second session): the 3B export in the background; the
# head-dim-256 bench (tier 1 by rule now) beside sdpa_flash; issue #26's "measure both
# and pick" on the 1.1B at 8K (resident, host state with the CPU update, with the GPU
# update); then the 3B at 512K dilated with the GPU run's GC at 10% (host peak vs plan).
R=$(pwd); T0=$(date +%s)
cd .gpu && tar xJf b/lcc.tar.xz && cd "$R"
L=$R/.gpu/lcc; mkdir -p $OUT/logs /tmp/x3b /tmp/l
( t=$(date +%s); python3 .gpu/b/anchors/hf_llama.py --preset 3b export /tmp/x3b > $OUT/logs/export3b.log 2>&1; echo "export3b rc=$? $(( $(date +%s)-t )) s" >> $OUT/logs/export3b.log ) &
E3=$!
( python3 .gpu/b/anchors/hf_llama.py export /tmp/l > $OUT/logs/export1b.log 2>&1; echo "export1b rc=$?" >> $OUT/logs/export1b.log ) &
E1=$!
timeout 60 $L bench attention --T 16384 --H 8 --D 256 --anchors .gpu/b/anchors > $OUT/logs/hd256.log 2>&1; echo "bench D=256 rc=$? at $(( $(date +%s)-T0 )) s"
grep -vE "^anchor:" $OUT/logs/hd256.log | tail -9 | cut -c1-220
wait $E1; tail -1 $OUT/logs/export1b.log
for v in "--optimizer-state=device" "--optimizer-state=host --optimizer-update=cpu" "--optimizer-state=host --optimizer-update=gpu"; do
  n=${v//[^a-z]/}
  timeout 90 $L train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 8 --progress-every 1 $v > $OUT/logs/$n.log 2>&1; echo "$v rc=$? at $(( $(date +%s)-T0 )) s"
  grep -E "^(state|memory|host|step  )" $OUT/logs/$n.log | cut -c1-300; grep -E "^step +[0-9]+/" $OUT/logs/$n.log | tail -2 | cut -c1-200
done
wait $E3; tail -1 $OUT/logs/export3b.log; free -g | head -2
timeout $(( 585 - ($(date +%s) - T0) )) $L train /tmp/x3b/llama_3b.onnx --device=cuda --precision=bf16 --attention=dilated --data=synthetic:copy --seq-len 524288 --batch 1 --steps 3 --progress-every 1 > $OUT/logs/l3b_512k.log 2>&1; echo "lcc 3b 512k rc=$? at $(( $(date +%s)-T0 )) s"
grep -vE "^step +[0-9]+/" $OUT/logs/l3b_512k.log | grep -E "^(host|memory|trained)" | cut -c1-300; grep -E "^step +[0-9]+/" $OUT/logs/l3b_512k.log | tail -3
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
