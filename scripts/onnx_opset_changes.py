"""Lists the default-domain ONNX ops redefined after opset 23 (frontends/onnx/opset.go's
newerVersions table was read off its output), and writes every op's version history
and the schemas of some ops' versions from 23 on to $OUT/schemas.json.

Run where the onnx Python package exists (the GPU machine has onnx 1.23.1):
    OUT=DIR python3 scripts/onnx_opset_changes.py
"""
import json, os, sys
import onnx
from onnx import defs
out = os.environ.get("OUT", ".")
hist = {}
for s in defs.get_all_schemas_with_history():
    if s.domain not in ("", "ai.onnx"):
        continue
    hist.setdefault(s.name, []).append(s.since_version)
hist = {k: sorted(v) for k, v in hist.items()}
newer = {k: [x for x in v if x > 23] for k, v in hist.items() if any(x > 23 for x in v)}
detail = {}
for op in ["Attention", "ReduceLogSumExp", "ReduceLogSum", "ReduceSum", "Cast", "Reshape", "Transpose", "Squeeze",
           "Unsqueeze", "Shape", "Flatten", "Identity", "Constant", "ConstantOfShape", "Pad", "Size", "TopK", "Range",
           "Mod", "CastLike", "Swish", "SwiGLU", "Einsum", "OneHot"]:
    for v in hist.get(op, []):
        if v < 23:
            continue
        s = defs.get_schema(op, v)
        detail[f"{op}-{v}"] = {
            "attributes": {a: str(s.attributes[a].type) for a in s.attributes},
            "inputs": [(i.name, i.option.name if hasattr(i.option, "name") else str(i.option)) for i in s.inputs],
            "outputs": [o.name for o in s.outputs],
            "types": [(t.type_param_str, list(t.allowed_type_strs)) for t in s.type_constraints],
            "doc": s.doc,
        }
json.dump({"onnx": onnx.__version__, "max_opset": defs.onnx_opset_version(), "newer_than_23": newer,
           "history": hist, "detail": detail}, open(os.path.join(out, "schemas.json"), "w"), indent=1, sort_keys=True)
print("onnx", onnx.__version__, "opset", defs.onnx_opset_version())
for k in sorted(newer):
    print(k, newer[k])
