#!/usr/bin/env bash
# Planned device call 3: issue #26's "measure both and pick" for a state in host memory.
# The 1.1B Llama at T=8192 with --optimizer-state=host, the update on the CPU and on the
# GPU (streamed), beside the resident optimizer, 8 steps each, in one command: the step
# times and the update's split say which --optimizer-update the plan should pick by rule.
R=$(pwd); T0=$(date +%s)
[ -x .gpu/lcc ] || (cd .gpu && tar xJf b/lcc.tar.xz)
L=$R/.gpu/lcc; mkdir -p $OUT/logs
[ -f /tmp/l/llama_1b.onnx ] || python3 .gpu/b/anchors/hf_llama.py export /tmp/l > $OUT/logs/export1b.log 2>&1
nproc; free -g | head -2
for v in "--optimizer-state=device" "--optimizer-state=host --optimizer-update=cpu" "--optimizer-state=host --optimizer-update=gpu"; do
  n=${v//[^a-z]/}
  timeout 150 $L train /tmp/l/llama_1b.onnx --device=cuda --precision=bf16 --data=synthetic:copy --seq-len 8192 --batch 1 --steps 8 --progress-every 1 $v > $OUT/logs/$n.log 2>&1; echo "$v rc=$? at $(( $(date +%s)-T0 )) s"
  grep -E "^(state|optimizer state|memory|host)" $OUT/logs/$n.log | cut -c1-300; grep -E "^step +[0-9]+/" $OUT/logs/$n.log | tail -3 | cut -c1-200
done
tar -C $OUT -czf $OUT/logs.tgz logs && rm -rf $OUT/logs
