#!/bin/sh
# graph_bench.sh: the flagship's step at T=512 (bf16) with the CUDA graph on and
# off, alternating twice, then the roofline profile (uncaptured), in one command.
#
#   sh scripts/graph_bench.sh LCC ANCHORS [OUT] [SEQ]
#
# LCC is the lcc binary (.gpu/lcc), ANCHORS a copy of ../shared/bench
# (.gpu/b/anchors: flagship.py exports the model), OUT a scratch folder
# (/tmp/f), SEQ the sequence length (512). Each run prints
# "step    median X ms over steps 3..N (cuda graph: ...)"; the bar is
# off/on ≥ 1/0.7 (capture cuts the step time by at least 30%).
set -eu
LCC=${1:?usage: graph_bench.sh LCC ANCHORS [OUT] [SEQ]}
ANCHORS=${2:?usage: graph_bench.sh LCC ANCHORS [OUT] [SEQ]}
OUT=${3:-/tmp/f}
SEQ=${4:-512}
mkdir -p "$OUT"
[ -f "$OUT/flagship.onnx" ] || python3 "$ANCHORS/flagship.py" export "$OUT"
run() {
	"$LCC" train "$OUT/flagship.onnx" --device=cuda --precision=bf16 --data=synthetic:copy \
		--seq-len "$SEQ" --batch 1 --steps 40 --progress-every 0 "$@"
}
for i in 1 2; do
	echo "== run $i: --cuda-graph=on"
	run --cuda-graph=on | grep -E '^(cuda graph|step |trained|program)'
	echo "== run $i: --cuda-graph=off"
	run --cuda-graph=off | grep -E '^(cuda graph|step |trained|program)'
done
echo "== roofline at T=$SEQ (profiled steps run uncaptured)"
run --profile --steps 10
echo "== roofline at T=4096"
"$LCC" train "$OUT/flagship.onnx" --device=cuda --precision=bf16 --data=synthetic:copy \
	--seq-len 4096 --batch 1 --steps 10 --progress-every 0 --profile
