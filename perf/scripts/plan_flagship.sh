#!/bin/sh
# Plans the flagship (../shared/bench/flagship.py, carried as .gpu/anchors) with
# lcc compile and prints, per configuration, the chosen checkpoint policy and the
# planned per-GPU peak by its components (one memory model: arena + optimizer
# state + fixed costs), so one device call shows the plan at 1M tokens.
#
#   perf/scripts/plan_flagship.sh LCC ANCHORS_DIR OUT_DIR
#
# Exports the model to $FLAGSHIP_DIR (default /tmp/f; 885 MB, about 40 s) unless it
# holds flagship.onnx; writes OUT_DIR/plan_<name>.json (the reports) and prints a table.
set -u
lcc=${1:?usage: plan_flagship.sh LCC ANCHORS_DIR OUT_DIR}
anchors=${2:?}
out=${3:?}
mkdir -p "$out"
f=${FLAGSHIP_DIR:-/tmp/f}
[ -f "$f/flagship.onnx" ] || python3 "$anchors/flagship.py" export "$f" || exit 1
run() {
	name=$1
	shift
	"$lcc" compile "$f/flagship.onnx" --target=h200x1 --loss=cross-entropy --report=json "$@" \
		>"$out/plan_$name.json" 2>"$out/plan_$name.err"
	echo "$name exit=$? $*" >>"$out/plan_runs.txt"
}
: >"$out/plan_runs.txt"
run 1m_dilated_bf16 --seq-len=1048576 --attention=dilated --precision=bf16
run 1m_dilated_bf16_layers --seq-len=1048576 --attention=dilated --precision=bf16 --checkpoint=layers
run 4k_bf16 --seq-len=4096 --precision=bf16
run 4k_fp32 --seq-len=4096
run 64k_dilated_bf16 --seq-len=65536 --attention=dilated --precision=bf16
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
gib = lambda b: b / 2**30
print("%-24s %-10s %9s %9s %9s %7s  %s" % ("config", "policy", "peak GiB", "arena", "optim", "fixed", "tried / error"))
for line in open(os.path.join(out, "plan_runs.txt")):
    name = line.split()[0]
    try:
        r = json.load(open(os.path.join(out, "plan_%s.json" % name)))
    except Exception:
        err = open(os.path.join(out, "plan_%s.err" % name)).read().strip()
        print("%-24s %s" % (name, err[-400:]))
        continue
    m, c = r["memory"], r["checkpoints"]
    print("%-24s %-10s %9.2f %9.2f %9.2f %7.2f  %s" % (name, c["policy"], gib(m["per_gpu_peak_bytes"]),
          gib(m.get("arena_bytes", 0)), gib(m["optimizer_bytes"]), gib(m.get("fixed_bytes", 0)),
          " ".join(c.get("tried") or [])))
PY
