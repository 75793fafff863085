package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// flatKernel renders a grid-stride kernel over n output elements whose loop body
// is body (with i the element index).
// The comment lands in the kernel source, so a .cu file in compile -o says which
// node it came from.
// The template the body fills: a grid-stride loop over i in [0, n) with i
// of the index type idxType(n) picks; the body may declare locals and must
// write only element i of its outputs, since threads run in any order.
func (g *gen) flatKernel(op, comment string, n int64, params []Param, args []int, body string) {
	if n == 0 {
		return // an empty tensor: nothing to launch
	}
	var src strings.Builder
	fmt.Fprintf(&src, "// %s\n", comment)
	fmt.Fprintf(&src, "extern \"C\" __global__ void __launch_bounds__(256) @KERNEL@(%s) {\n", signature(params))
	src.WriteString(gridStride(idxType(n), n))
	src.WriteString(body)
	src.WriteString("  }\n}\n")
	// 256 threads a block and at most 2^20 blocks (flatGrid): the bound on the
	// grid stride that idxType's int indices rely on.
	grid, block := flatGrid(n)
	g.emit(kernelSpec{op: op, body: src.String(), grid: grid, block: block, params: params, args: args})
}

// lowerFull fills a full that some non-elementwise node reads.
// Fulls that only elementwise kernels read are inlined as literals there and
// never reach this lowering (see the package doc).
func lowerFull(g *gen, n *ir.Node) error {
	y := n.Result()
	// The value is a literal in the source: each full is its own kernel, cached
	// by content, so equal fulls share one.
	v := literal(y.Type.DType, n.AttrFloat("value"))
	g.flatKernel("full", fmt.Sprintf("full %v = %s", y.Type, v), y.Type.Numel(),
		[]Param{g.param("y", y, true)}, []int{g.ids[y]},
		fmt.Sprintf("    y[i] = %s;\n", store(g.storageOf(y), v)))
	return nil
}

// lowerRange is start + i·delta in double, then converted (integers truncate).
func lowerRange(g *gen, n *ir.Node) error {
	y := n.Result()
	start, delta := n.AttrFloat("start"), n.AttrFloat("delta")
	g.flatKernel("range", fmt.Sprintf("range %v", y.Type), y.Type.Numel(),
		[]Param{g.param("y", y, true)}, []int{g.ids[y]},
		// start + i·delta, not a running sum: each element is exact on its own and the
		// kernel needs no ordering between threads.
		fmt.Sprintf("    const double v = %s + (double)i * %s;\n    y[i] = %s;\n", dlit(start), dlit(delta),
			store(g.storageOf(y), castFromDouble(y.Type.DType, "v"))))
	return nil
}

// castFromDouble converts a double to dtype's compute type, truncating toward
// zero for integers as the CPU interpreter does.
func castFromDouble(dt tensor.DType, v string) string {
	if dt.IsFloat() {
		return v
	}
	// Integers compute as long long; store narrows to the stored width.
	return "(long long)(" + v + ")"
}

// stridedCopy copies x into y where y's element at coordinates c reads x at
// base + Σ (c_d mod mods_d)·st_d (mods_d = 0: no modulus). Transpose, expand,
// slice and tile are all of this form.
func (g *gen) stridedCopy(op string, n *ir.Node, base int64, st, mods []int64) {
	x, y := n.Args[0], n.Result()
	shape := y.Type.Shape
	// Both sides must fit the index type: an expand reads a small x into a big y,
	// a slice a big x into a small y.
	it := idxType(max(y.Type.Numel(), x.Type.Numel()))
	var terms []string
	if base != 0 {
		terms = append(terms, fmt.Sprint(base))
	}
	for d, s := range st {
		// c0, c1, ... are the output coordinates that coords declares, outermost
		// first.
		c := fmt.Sprintf("c%d", d)
		// A modulus equal to the dim is a no-op; dropping it saves a division per element.
		if mods != nil && mods[d] != 0 && mods[d] != shape[d] {
			c = fmt.Sprintf("(c%d %% %d)", d, mods[d])
		}
		switch {
		// A broadcast dim contributes nothing to the offset.
		case s == 0:
		case s == 1:
			terms = append(terms, c)
		default:
			terms = append(terms, fmt.Sprintf("%s * %d", c, s))
		}
	}
	off := "0"
	if len(terms) > 0 {
		off = strings.Join(terms, " + ")
	}
	params := []Param{g.param("y", y, true), g.param("x", x, false)}
	g.flatKernel(op, fmt.Sprintf("%s %v -> %v", op, x.Type, y.Type), y.Type.Numel(), params,
		[]int{g.ids[y], g.ids[x]}, coords("c", "i", it, shape)+fmt.Sprintf("    y[i] = x[%s];\n", off))
}

// lowerTranspose reads x's dims in perm order: output dim i walks input dim perm[i].
func lowerTranspose(g *gen, n *ir.Node) error {
	xs := stridesOf(n.Args[0].Type.Shape)
	perm := n.AttrInts("perm")
	st := make([]int64, len(perm))
	for i, p := range perm {
		st[i] = xs[p]
	}
	g.stridedCopy("transpose", n, 0, st, nil)
	return nil
}

// lowerExpand reads broadcast dims with stride 0, so every output copy reads one element.
func lowerExpand(g *gen, n *ir.Node) error {
	g.stridedCopy("expand", n, 0, bcastStrides(n.Args[0].Type.Shape, n.Result().Type.Shape), nil)
	return nil
}

// lowerSlice takes the normalised attributes (0 ≤ start ≤ d, step ≠ 0).
func lowerSlice(g *gen, n *ir.Node) error {
	x := n.Args[0]
	xs := stridesOf(x.Type.Shape)
	st := append([]int64{}, xs...)
	var base int64
	axes, starts, steps := n.AttrInts("axes"), n.AttrInts("starts"), n.AttrInts("steps")
	for i, a := range axes {
		ax, err := ir.AxisIndex(a, x.Type.Rank())
		if err != nil {
			return err
		}
		// A slice is a strided view: start moves the base, step scales the stride (a
		// negative step walks backwards from start).
		base += starts[i] * xs[ax]
		st[ax] = steps[i] * xs[ax]
	}
	// An empty slice may have start = d, past the last element: no kernel, so
	// the out-of-range base is never used.
	if n.Result().Type.Numel() == 0 {
		return nil
	}
	g.stridedCopy("slice", n, base, st, nil)
	return nil
}

// lowerTile wraps each output coordinate by the input's dim, repeating x.
func lowerTile(g *gen, n *ir.Node) error {
	x := n.Args[0]
	g.stridedCopy("tile", n, 0, stridesOf(x.Type.Shape), x.Type.Shape)
	return nil
}

// lowerConcat copies each operand into its region of the result; operands
// their producers placed there (view.go) need no copy. A concat that is itself
// placed in an outer concat writes into its region of that one.
func lowerConcat(g *gen, n *ir.Node) error {
	y := n.Result()
	ax, err := ir.AxisIndex(n.AttrInt("axis"), y.Type.Rank())
	if err != nil {
		return err
	}
	dst := g.viewOf(y)
	// at is the running offset along axis, in elements of the axis.
	at := int64(0)
	for _, a := range n.Args {
		// Each operand's region shares the result's strides; only the offset moves along axis.
		region := view{root: dst.root, off: dst.off + at*dst.st[ax], st: dst.st}
		at += a.Type.Shape[ax]
		// A placed operand's producer already wrote into this region.
		if g.placed[a] {
			continue
		}
		g.copyView("concat", fmt.Sprintf("concat on axis %d into %v: operand %v", ax, y.Type, a.Type),
			a.Type.Shape, region, g.viewOf(a))
	}
	return nil
}

// lowerSplit copies each result that is not a read view out of the input.
func lowerSplit(g *gen, n *ir.Node) error {
	x := n.Args[0]
	ax, err := ir.AxisIndex(n.AttrInt("axis"), x.Type.Rank())
	if err != nil {
		return err
	}
	src := g.viewOf(x)
	at := int64(0)
	for _, r := range n.Results {
		region := view{root: src.root, off: src.off + at*src.st[ax], st: src.st}
		at += r.Type.Shape[ax]
		// A result that readers index in place needs no buffer and no copy.
		if _, ok := g.views[r]; ok {
			continue
		}
		g.copyView("split", fmt.Sprintf("split %v on axis %d: result %v", x.Type, ax, r.Type),
			r.Type.Shape, identity(r), region)
	}
	return nil
}

// copyView copies the elements of shape from src to dst (views of one storage
// dtype), 16 bytes per thread and step where both sides are contiguous and
// aligned along their coalesced rows, one element otherwise.
func (g *gen) copyView(op, comment string, shape []int64, dst, src view) {
	n := prod(shape)
	if n == 0 {
		return
	}
	// The views share one storage dtype (copyView's contract), so the copy
	// moves raw elements, with no conversion.
	dt := g.storageOf(src.root)
	d := &access{v: dst.root, param: "y", dt: dt, off: dst.off, st: slices.Clone(dst.st)}
	s := &access{v: src.root, param: "x", dt: dt, off: src.off, st: slices.Clone(src.st)}
	// Coalesce dims that are contiguous on both sides first: a long innermost run is
	// what makes 16-byte accesses possible.
	cs := coalesce(shape, []*access{d, s})
	// A uint4 (16 bytes) holds 4 f32, 8 bf16 or 16 i8 elements: the copy works
	// on raw bits, so any dtype vectorises.
	lanes := int64(16 / dt.Size())
	last := len(cs) - 1
	// uint4 accesses need every vector to start on a 16-byte boundary, on both
	// sides: the run, every outer stride and the offset must be whole vectors.
	vec := last >= 0 && cs[last]%lanes == 0
	for _, a := range []*access{d, s} {
		vec = vec && a.st[last] == 1 && a.off%lanes == 0
		for _, st := range a.st[:max(last, 0)] {
			vec = vec && st%lanes == 0
		}
	}
	if !vec {
		lanes = 1
	}
	it := idxType(max(n, dst.root.Type.Numel(), src.root.Type.Numel()))
	groups := n / lanes
	var body strings.Builder
	fmt.Fprintf(&body, "    const %s i = g * %d;\n", it, lanes)
	body.WriteString(ewCoords(it, cs))
	if vec {
		fmt.Fprintf(&body, "    *reinterpret_cast<uint4*>(y + %s) = *reinterpret_cast<const uint4*>(x + %s);\n",
			ewOffset(d, cs), ewOffset(s, cs))
	} else {
		fmt.Fprintf(&body, "    y[%s] = x[%s];\n", ewOffset(d, cs), ewOffset(s, cs))
	}
	var src2 strings.Builder
	fmt.Fprintf(&src2, "// %s\n", comment)
	params := []Param{g.param("y", dst.root, true), g.param("x", src.root, false)}
	fmt.Fprintf(&src2, "extern \"C\" __global__ void __launch_bounds__(256) @KERNEL@(%s) {\n", signature(params))
	fmt.Fprintf(&src2, "  for (%s g = (%s)blockIdx.x * blockDim.x + threadIdx.x; g < (%s)%d; g += (%s)gridDim.x * blockDim.x) {\n",
		it, it, it, groups, it)
	src2.WriteString(body.String())
	src2.WriteString("  }\n}\n")
	// One thread a group of lanes elements.
	grid, block := flatGrid(groups)
	g.emit(kernelSpec{op: op, body: src2.String(), grid: grid, block: block, params: params,
		args: []int{g.ids[dst.root], g.ids[src.root]}})
}

// lowerTrilu keeps j − i ≤ k (lower) or j − i ≥ k (upper) on the last two dims.
func lowerTrilu(g *gen, n *ir.Node) error {
	x, y := n.Args[0], n.Result()
	r := x.Type.Rank()
	rows, cols := x.Type.Shape[r-2], x.Type.Shape[r-1]
	k := n.AttrInt("k")
	cmp := "<="
	if n.AttrBool("upper") {
		cmp = ">="
	}
	zero := store(g.storageOf(y), literal(y.Type.DType, 0))
	body := fmt.Sprintf("    const long long col = i %% %d, row = (i / %d) %% %d;\n"+
		"    y[i] = (col - row %s %d) ? x[i] : %s;\n", cols, cols, rows, cmp, k, zero)
	g.flatKernel("trilu", fmt.Sprintf("trilu %v", x.Type), y.Type.Numel(),
		[]Param{g.param("y", y, true), g.param("x", x, false)}, []int{g.ids[y], g.ids[x]}, body)
	return nil
}

// badValue is what a gather writes for an out-of-range index: NaN, or 0 for
// integers (the CPU interpreter reports an error instead).
// A kernel cannot return an error: NaN makes a bad index visible downstream
// instead of reading out of bounds.
func (g *gen) badValue(v *ir.Value) string {
	if v.Type.DType.IsFloat() {
		return store(g.storageOf(v), "LCC_NAN")
	}
	return store(g.storageOf(v), "0")
}

// wrapIndex renders the ONNX index fix-up of idx into a dim of size d as a
// statement defining j, and the in-range test.
func wrapIndex(j, idx string, d int64) string {
	// Negative indices count from the end, once, as ONNX says; what is still out of
	// range is reported through ok_j rather than clamped.
	return fmt.Sprintf("    long long %s = (long long)(%s); if (%s < 0) %s += %d;\n    const bool ok_%s = %s >= 0 && %s < %d;\n",
		j, idx, j, j, d, j, j, j, d)
}

// lowerGather is ONNX Gather: y = x[:axis] ++ idx ++ x[axis+1:] in shape.
func lowerGather(g *gen, n *ir.Node) error {
	x, idx, y := n.Args[0], n.Args[1], n.Result()
	ax, err := ir.AxisIndex(n.AttrInt("axis"), x.Type.Rank())
	if err != nil {
		return err
	}
	m, inner, ni := x.Type.Shape[ax], prod(x.Type.Shape[ax+1:]), idx.Type.Numel()
	// y viewed as [outer, ni, inner]: o and in pass through, p picks the index.
	body := fmt.Sprintf("    const long long o = i / %d, p = (i / %d) %% %d, in = i %% %d;\n", ni*inner, inner, ni, inner) +
		wrapIndex("j", "idx[p]", m) +
		fmt.Sprintf("    y[i] = ok_j ? x[(o * %d + j) * %d + in] : %s;\n", m, inner, g.badValue(y))
	g.flatKernel("gather", fmt.Sprintf("gather %v by %v on axis %d", x.Type, idx.Type, ax), y.Type.Numel(),
		[]Param{g.param("y", y, true), g.param("x", x, false), g.param("idx", idx, false)},
		[]int{g.ids[y], g.ids[x], g.ids[idx]}, body)
	return nil
}

// lowerGatherElements is y[c] = x[c with c_axis := idx[c]].
func lowerGatherElements(g *gen, n *ir.Node) error {
	x, idx, y := n.Args[0], n.Args[1], n.Result()
	ax, err := ir.AxisIndex(n.AttrInt("axis"), x.Type.Rank())
	if err != nil {
		return err
	}
	xs := stridesOf(x.Type.Shape)
	st := append([]int64{}, xs...)
	// The axis coordinate comes from idx, not from c, so its stride is dropped here
	// and added back as j·stride below.
	st[ax] = 0
	body := coords("c", "i", "long long", idx.Type.Shape) + wrapIndex("j", "idx[i]", x.Type.Shape[ax]) +
		fmt.Sprintf("    y[i] = ok_j ? x[%s + j * %d] : %s;\n", offset("c", st), xs[ax], g.badValue(y))
	g.flatKernel("gather_elements", fmt.Sprintf("gather_elements %v by %v on axis %d", x.Type, idx.Type, ax),
		y.Type.Numel(), []Param{g.param("y", y, true), g.param("x", x, false), g.param("idx", idx, false)},
		[]int{g.ids[y], g.ids[x], g.ids[idx]}, body)
	return nil
}

// lowerGatherND is ONNX GatherND with batch_dims.
func lowerGatherND(g *gen, n *ir.Node) error {
	x, idx, y := n.Args[0], n.Args[1], n.Result()
	b := int(n.AttrInt("batch_dims"))
	q := int(idx.Type.Shape[idx.Type.Rank()-1])
	xs := stridesOf(x.Type.Shape)
	inner := prod(x.Type.Shape[b+q:])
	rows := prod(idx.Type.Shape[:idx.Type.Rank()-1])
	// The max(…, 1) guards keep empty shapes from dividing by zero in the generated
	// source; such kernels are never launched (flatKernel skips n = 0).
	perBatch := rows / max(prod(idx.Type.Shape[:b]), 1)
	batchSize := prod(x.Type.Shape[b:])
	var body strings.Builder
	fmt.Fprintf(&body, "    const long long r = i / %d, e = i %% %d;\n", max(inner, 1), max(inner, 1))
	fmt.Fprintf(&body, "    long long src = (r / %d) * %d + e;\n    bool ok = true;\n", max(perBatch, 1), batchSize)
	// Each of the q index components addresses one leading dim of x after the batch dims.
	for d := 0; d < q; d++ {
		j := fmt.Sprintf("j%d", d)
		body.WriteString(wrapIndex(j, fmt.Sprintf("idx[r * %d + %d]", q, d), x.Type.Shape[b+d]))
		fmt.Fprintf(&body, "    ok = ok && ok_%s; src += %s * %d;\n", j, j, xs[b+d])
	}
	// All q components are checked before the read: one bad component poisons
	// the whole slice with badValue rather than reading elsewhere in x.
	fmt.Fprintf(&body, "    y[i] = ok ? x[src] : %s;\n", g.badValue(y))
	g.flatKernel("gather_nd", fmt.Sprintf("gather_nd %v by %v", x.Type, idx.Type), y.Type.Numel(),
		[]Param{g.param("y", y, true), g.param("x", x, false), g.param("idx", idx, false)},
		[]int{g.ids[y], g.ids[x], g.ids[idx]}, body.String())
	return nil
}
