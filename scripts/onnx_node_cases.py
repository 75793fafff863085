"""Converts ONNX's own operator test cases to model + safetensors pairs for lcc.

Run where the onnx Python package exists (the GPU machine has onnx 1.23):
    python3 scripts/onnx_node_cases.py OUTDIR
Writes OUTDIR/onnx_node_cases.tar.gz and OUTDIR/onnx_node_cases.json (its manifest).

The cases come from onnx.backend.test.case.node.collect_testcases(): one graph per
case (usually one node; "_expanded" cases hold the op's function body) with inputs
and expected outputs computed by ONNX's numpy reference. Each kept case becomes
    cases/<name>/model.onnx
    cases/<name>/ref.safetensors   inputs under the graph's input names, expected
                                   outputs under its output names (as lcc check --ref
                                   binds them)
A case is skipped, with the reason in the manifest, when a tensor is not numeric
(strings, sequences, optionals, maps), has a dtype safetensors cannot hold, when an
input and an output share a name, or when its files exceed MAX_BYTES (kept small
enough to commit). The archive holds manifest.json too. No network is used.
"""
import io, json, os, struct, sys, tarfile, time, traceback

import numpy as np
import onnx
from onnx import numpy_helper

MAX_BYTES = 1 << 20

# numpy dtype name -> safetensors dtype string.
ST_DTYPES = {
    "float32": "F32", "float16": "F16", "float64": "F64", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}


def safetensors_bytes(tensors):
    """Encodes {name: ndarray} in the safetensors format (names sorted)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        raw = a.tobytes()
        header[name] = {"dtype": ST_DTYPES[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def as_array(v):
    """Returns (ndarray, None) or (None, reason)."""
    if v is None:
        return None, "absent optional value"
    if isinstance(v, list):
        return None, "sequence value"
    if isinstance(v, dict):
        return None, "map value"
    if isinstance(v, onnx.TensorProto):
        try:
            v = numpy_helper.to_array(v)
        except Exception as e:  # noqa: BLE001
            return None, f"tensor proto not convertible: {e}"
    if not isinstance(v, np.ndarray):
        try:
            v = np.asarray(v)
        except Exception:  # noqa: BLE001
            return None, f"value of type {type(v).__name__}"
    if v.dtype.kind in "OUS":
        return None, "string value"
    if v.dtype.name not in ST_DTYPES:
        return None, f"dtype {v.dtype.name} has no safetensors encoding"
    return v, None


def value_kind(vi):
    t = vi.type
    k = t.WhichOneof("value")
    return k or "untyped"


def collect():
    np.random.seed(0)
    from onnx.backend.test.case import node
    try:
        cases = node.collect_testcases(None)
    except TypeError:
        cases = node.collect_testcases()
    out = []
    for c in cases:
        out.append((c.name, c.model, c.data_sets, c.rtol, c.atol))
    return out, "collect_testcases"


def collect_from_data():
    """Fallback: the generated data ONNX ships under onnx/backend/test/data/node."""
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    out = []
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        mp = os.path.join(d, "model.onnx")
        if not os.path.exists(mp):
            continue
        m = onnx.load(mp)
        sets = []
        for ds in sorted(x for x in os.listdir(d) if x.startswith("test_data_set_")):
            ins, outs = [], []
            for kind, lst in (("input", ins), ("output", outs)):
                i = 0
                while os.path.exists(os.path.join(d, ds, f"{kind}_{i}.pb")):
                    t = onnx.TensorProto()
                    with open(os.path.join(d, ds, f"{kind}_{i}.pb"), "rb") as fh:
                        t.ParseFromString(fh.read())
                    lst.append(t)
                    i += 1
            sets.append((ins, outs))
        out.append((name, m, sets, 1e-3, 1e-7))
    return out, "data/node"


def convert(name, model, data_sets):
    """Returns ({path: bytes}, None) or (None, reason)."""
    g = model.graph
    for vi in list(g.input) + list(g.output):
        k = value_kind(vi)
        if k != "tensor_type":
            return None, f"{vi.name or '?'} is of type {k}"
    files = {}
    total = 0
    for si, (ins, outs) in enumerate(data_sets):
        if len(ins) != len(g.input) or len(outs) != len(g.output):
            return None, (f"data set {si}: {len(ins)} inputs/{len(outs)} outputs for a graph with "
                          f"{len(g.input)}/{len(g.output)}")
        t = {}
        for vi, v in list(zip(g.input, ins)) + list(zip(g.output, outs)):
            a, why = as_array(v)
            if why:
                return None, f"{vi.name}: {why}"
            if vi.name in t:
                return None, f"{vi.name} is both an input and an output"
            t[vi.name] = a
        ref = safetensors_bytes(t)
        suffix = "" if si == 0 else f".{si}"
        files[f"ref{suffix}.safetensors"] = ref
        total += len(ref)
    m = model.SerializeToString()
    files["model.onnx"] = m
    total += len(m)
    if total > MAX_BYTES:
        return None, f"too large: {total} bytes (limit {MAX_BYTES})"
    return files, None


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    t0 = time.time()
    try:
        cases, source = collect()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        cases, source = collect_from_data()
    manifest = {"onnx": onnx.__version__, "numpy": np.__version__, "source": source,
                "max_bytes": MAX_BYTES, "cases": []}
    buf = io.BytesIO()
    seen = set()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9, format=tarfile.PAX_FORMAT) as tar:
        def add(path, data):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))

        for name, model, data_sets, rtol, atol in sorted(cases, key=lambda c: c[0]):
            if name in seen:
                continue
            seen.add(name)
            ops = sorted({n.op_type for n in model.graph.node})
            opset = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
            entry = {"name": name, "ops": ops, "opset": opset, "rtol": rtol, "atol": atol}
            try:
                files, why = convert(name, model, data_sets)
            except Exception as e:  # noqa: BLE001
                files, why = None, f"conversion failed: {type(e).__name__}: {e}"
            if why:
                entry["skipped"] = why
            else:
                entry["files"] = sorted(files)
                for fn, data in sorted(files.items()):
                    add(f"cases/{name}/{fn}", data)
            manifest["cases"].append(entry)
        mj = json.dumps(manifest, indent=1, sort_keys=True).encode()
        add("manifest.json", mj)
    with open(os.path.join(outdir, "onnx_node_cases.tar.gz"), "wb") as fh:
        fh.write(buf.getvalue())
    with open(os.path.join(outdir, "onnx_node_cases.json"), "wb") as fh:
        fh.write(mj)
    kept = sum(1 for c in manifest["cases"] if "skipped" not in c)
    reasons = {}
    for c in manifest["cases"]:
        if "skipped" in c:
            r = c["skipped"].split(":")[-1].strip() if "too large" not in c["skipped"] else "too large"
            reasons[r] = reasons.get(r, 0) + 1
    print(f"node cases: source={source} total={len(manifest['cases'])} kept={kept} "
          f"archive={len(buf.getvalue())} bytes in {time.time() - t0:.1f}s")
    for r, n in sorted(reasons.items(), key=lambda x: -x[1])[:20]:
        print(f"  skipped {n:4d}: {r}")


if __name__ == "__main__":
    main()
