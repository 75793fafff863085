package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// The op → C expression tables of the elementwise renderer, in the style of
// tinygrad's cstyle renderer: $0, $1, $2 are the operands in their compute
// types. floatExpr serves float and double operands (the lcc_* helpers are
// overloaded for both), intExpr int64 operands, boolExpr bools. A missing entry
// is an op the IR does not allow on that kind (Infer rejects it).
//
// recip's integer literal 1 converts to the operand's type, so one text serves float
// and double; isnan is x != x, true only for NaN, with no overload to pick.
var floatExpr = map[ir.Op]string{
	ir.OpNeg:     "(-$0)",
	ir.OpExp:     "lcc_exp($0)",
	ir.OpLog:     "lcc_log($0)",
	ir.OpSqrt:    "lcc_sqrt($0)",
	ir.OpRsqrt:   "lcc_rsqrt($0)",
	ir.OpRecip:   "(1 / $0)",
	ir.OpTanh:    "lcc_tanh($0)",
	ir.OpErf:     "lcc_erf($0)",
	ir.OpSigmoid: "lcc_sigmoid($0)",
	ir.OpRelu:    "lcc_relu($0)",
	ir.OpAbs:     "lcc_abs($0)",
	ir.OpCos:     "lcc_cos($0)",
	ir.OpSin:     "lcc_sin($0)",
	ir.OpSilu:    "lcc_silu($0)",
	ir.OpGelu:    "lcc_gelu($0)", // gelu {tanh} is geluTanhExpr
	ir.OpIsNaN:   "($0 != $0)",
	ir.OpAdd:     "($0 + $1)",
	ir.OpSub:     "($0 - $1)",
	ir.OpMul:     "($0 * $1)",
	ir.OpDiv:     "($0 / $1)",
	ir.OpPow:     "lcc_pow($0, $1)",
	ir.OpMax:     "lcc_max($0, $1)",
	ir.OpMin:     "lcc_min($0, $1)",
	ir.OpEq:      "($0 == $1)",
	ir.OpLt:      "($0 < $1)",
	ir.OpLe:      "($0 <= $1)",
	ir.OpGt:      "($0 > $1)",
	ir.OpGe:      "($0 >= $1)",
	ir.OpWhere:   "($0 ? $1 : $2)",
}

// geluTanhExpr is gelu with the tanh attribute: one op, two functions, so it
// cannot be a table entry (exprOf picks it per node).
const geluTanhExpr = "lcc_gelu_tanh($0)"

// stop_gradient is the identity on values (its gradient is autodiff's business).
func init() { floatExpr[ir.OpStopGradient] = "$0" }

// intExpr is floatExpr's counterpart for int64 compute values; ops with no
// integer meaning (exp, sqrt, ...) are absent, so exprOf reports them.
// An integer is never NaN, so isnan is false rather than an error.
var intExpr = map[ir.Op]string{
	ir.OpIsNaN: "false",
	ir.OpAdd:   "($0 + $1)",
	ir.OpSub:   "($0 - $1)",
	ir.OpMul:   "($0 * $1)",
	ir.OpDiv:   "($0 / $1)", // truncates, as ONNX Div on integers
	ir.OpPow:   "lcc_ipow($0, $1)",
	ir.OpMax:   "lcc_max($0, $1)",
	ir.OpMin:   "lcc_min($0, $1)",
	ir.OpEq:    "($0 == $1)",
	ir.OpLt:    "($0 < $1)",
	ir.OpLe:    "($0 <= $1)",
	ir.OpGt:    "($0 > $1)",
	ir.OpGe:    "($0 >= $1)",
	ir.OpWhere: "($0 ? $1 : $2)",
}

// boolExpr is for bool operands, where only logic, equality and where apply.
// Xor on bools is inequality: C has no logical ^^.
var boolExpr = map[ir.Op]string{
	ir.OpNot:   "(!$0)",
	ir.OpAnd:   "($0 && $1)",
	ir.OpOr:    "($0 || $1)",
	ir.OpXor:   "($0 != $1)",
	ir.OpEq:    "($0 == $1)",
	ir.OpWhere: "($0 ? $1 : $2)",
}

// resultFmt rounds or wraps a computed value (%s) to its IR dtype, as the CPU
// interpreter does after every op; values already exact in their compute type
// need nothing.
// Compute types are wider than the IR's narrow dtypes (float for bf16, long long
// for i32), so each op's result is narrowed again: otherwise a fused chain
// would keep extra precision and disagree with the interpreter, which rounds
// after every op.
var resultFmt = map[tensor.DType]string{
	tensor.BF16: "lcc_round_bf16(%s)",
	tensor.F16:  "lcc_round_f16(%s)",
	tensor.I32:  "(long long)(int)(%s)",
	tensor.I8:   "(long long)(signed char)(%s)",
	tensor.U8:   "(long long)(unsigned char)(%s)",
}

// castExpr converts x of dtype from to dtype to (ONNX Cast semantics as in the
// CPU interpreter: float → int truncates, → bool is x ≠ 0, bool → number is 0 or 1).
func castExpr(from, to tensor.DType, x string) string {
	switch {
	case to == tensor.Bool:
		return fmt.Sprintf("(%s != 0)", x)
	case from == tensor.Bool:
		return fmt.Sprintf("(%s ? %s : %s)", x, literal(to, 1), literal(to, 0))
	default:
		// A C cast to the compute type truncates toward zero, as Go's conversion in
		// the interpreter does; resultFmt then wraps to the IR width.
		return fmt.Sprintf("(%s)(%s)", computeC[to], x)
	}
}

// exprOf renders node n over operand expressions.
func exprOf(n *ir.Node, operands []string) (string, error) {
	// A cast depends on both dtypes, so it is a function, not a table entry.
	if n.Op == ir.OpCast {
		return castExpr(n.Args[0].Type.DType, n.Result().Type.DType, operands[0]), nil
	}
	dt := n.Args[len(n.Args)-1].Type.DType // where's branches decide, not its condition
	table := floatExpr
	switch {
	case dt == tensor.Bool:
		table = boolExpr
	case dt.IsInt():
		table = intExpr
	}
	tmpl, ok := table[n.Op]
	if n.Op == ir.OpGelu && n.AttrBool("tanh") {
		tmpl = geluTanhExpr
	}
	// Checked after the gelu swap: gelu's table entry exists in floatExpr only.
	if !ok {
		return "", fmt.Errorf("no %v form of elementwise op %s", dt, n.Op)
	}
	// Replace from the highest index down so "$1" is never matched inside "$10"'s text.
	for i := len(operands) - 1; i >= 0; i-- {
		tmpl = strings.ReplaceAll(tmpl, fmt.Sprintf("$%d", i), operands[i])
	}
	return tmpl, nil
}

// fusion is an open run of elementwise nodes with one output shape. Nodes that
// read none of its results may sit between its members; the run's kernel is
// launched after its last member, which keeps every dependence.
type fusion struct {
	nodes    []*ir.Node
	last     int
	shape    []int64
	produced map[*ir.Value]bool
}

// accepts says whether n can join the run: one output shape for the whole
// kernel, so one index space covers every member.
func (r *fusion) accepts(n *ir.Node) bool {
	return len(r.nodes) == 0 || slices.Equal(r.shape, n.Result().Type.Shape)
}

// add appends n, the i-th node of the function, to the run; the kernel goes
// after the last added node, so every member's operands exist by then.
func (r *fusion) add(i int, n *ir.Node) {
	if r.produced == nil {
		r.produced = map[*ir.Value]bool{}
		r.shape = n.Result().Type.Shape
	}
	r.nodes = append(r.nodes, n)
	r.last = i
	r.produced[n.Result()] = true
}

// feeds reports whether n reads a value of the run.
func (r *fusion) feeds(n *ir.Node) bool {
	for _, a := range n.Args {
		if r.produced[a] {
			return true
		}
	}
	return false
}

// access is one buffer a fused elementwise kernel reads or writes: a value's
// view (its own buffer, a read view, or its region of a concat) with strides
// over the run's (coalesced) dims.
type access struct {
	v     *ir.Value
	param string // the root's kernel parameter
	dt    tensor.DType
	off   int64
	st    []int64
	mode  vecMode
}

// vecMode is how an access moves the L lanes of one vector step.
type vecMode int

const (
	lanesMode vecMode = iota // L scalar accesses
	vecAccess                // 16-byte loads or stores
	bcastMode                // one element for every lane (stride 0 along the row)
)

// elementwise renders a run as one kernel. Values read outside the run (or
// returned) are stored; the rest live in registers. Inputs and outputs are
// accessed through their views (view.go), so slices, splits and transposes
// feeding the run and concats fed by it move no data of their own. When every
// buffer is f32 or bf16 and rows allow it, each thread handles L consecutive
// elements (8 for bf16, else 4) with 16-byte loads and stores where a view is
// contiguous and aligned, and L scalar accesses where not.
func (g *gen) elementwise(r *fusion) error {
	// members tells a use inside the run (kept in registers) from one outside
	// it (which forces a store).
	members := map[*ir.Node]bool{}
	for _, n := range r.nodes {
		members[n] = true
	}
	n := prod(r.shape)
	rank := len(r.shape)
	var ins, outs []*access
	// local maps each value to the C expression that holds it in the kernel: a
	// register name (x, v, r) or a literal.
	local := map[*ir.Value]string{}
	roots := map[*ir.Value]string{}
	var inRoots, outRoots []*ir.Value
	// root names each distinct buffer once: several views of one buffer share a
	// kernel parameter, so the signature does not grow with the number of views.
	root := func(v *ir.Value, out bool) string {
		if name, ok := roots[v]; ok {
			return name
		}
		var name string
		if out {
			name = fmt.Sprintf("out%d", len(outRoots))
			outRoots = append(outRoots, v)
		} else {
			name = fmt.Sprintf("in%d", len(inRoots))
			inRoots = append(inRoots, v)
		}
		roots[v] = name
		return name
	}
	// bcast lays a value's view over the run's dims (numpy broadcasting).
	bcast := func(v *ir.Value) (view, []int64) {
		w := g.viewOf(v)
		st := make([]int64, rank)
		vs := v.Type.Shape
		for j := range rank {
			d := j - (rank - len(vs))
			// A dim of size 1 (or a missing leading dim) keeps stride 0 and so repeats.
			if d >= 0 && vs[d] == r.shape[j] {
				st[j] = w.st[d]
			}
		}
		return w, st
	}
	// Values recomputed here (recompute.go) are rendered before the members,
	// from their own operands.
	var body strings.Builder
	var need func(a *ir.Value) error
	need = func(a *ir.Value) error {
		if r.produced[a] || local[a] != "" {
			return nil
		}
		// Scalar constants and fulls become literals: no load, and the compiler can fold them.
		if v, ok := inlinable(a); ok {
			local[a] = literal(a.Type.DType, v)
			return nil
		}
		if g.recompute[a] {
			var operands []string
			for _, b := range a.Def.Args {
				if err := need(b); err != nil {
					return err
				}
				operands = append(operands, local[b])
			}
			e, err := exprOf(a.Def, operands)
			if err != nil {
				return fmt.Errorf("node %s: %w", a.Def.Where(), err)
			}
			if f, ok := resultFmt[a.Type.DType]; ok {
				e = fmt.Sprintf(f, e)
			}
			local[a] = fmt.Sprintf("r%d", len(local))
			fmt.Fprintf(&body, "    const %s %s = %s;\n", computeC[a.Type.DType], local[a], e)
			return nil
		}
		w, st := bcast(a)
		ins = append(ins, &access{v: a, param: root(w.root, false), dt: g.storageOf(a), off: w.off, st: st})
		local[a] = fmt.Sprintf("x%d", len(ins)-1)
		return nil
	}
	for _, m := range r.nodes {
		for _, a := range m.Args {
			if err := need(a); err != nil {
				return err
			}
		}
	}
	// The nodes in order; stored results become outputs.
	var ops []string
	outVar := map[*access]string{}
	for k, m := range r.nodes {
		var operands []string
		for _, a := range m.Args {
			operands = append(operands, local[a])
		}
		e, err := exprOf(m, operands)
		if err != nil {
			return fmt.Errorf("node %s: %w", m.Where(), err)
		}
		res := m.Result()
		if f, ok := resultFmt[res.Type.DType]; ok {
			e = fmt.Sprintf(f, e)
		}
		v := fmt.Sprintf("v%d", k)
		fmt.Fprintf(&body, "    const %s %s = %s;\n", computeC[res.Type.DType], v, e)
		local[res] = v
		ops = append(ops, m.Op.String())
		// A result is stored when the function returns it or a node outside the run reads
		// it; a recomputed value's outside readers compute it again and need no store.
		stored := g.outputs[res]
		for _, u := range g.uses[res] {
			stored = stored || !members[u] && !g.recompute[res]
		}
		if stored {
			w, st := bcast(res)
			a := &access{v: res, dt: g.storageOf(res), off: w.off, st: st}
			a.param = root(w.root, true)
			outs = append(outs, a)
			outVar[a] = v
		}
	}
	if len(outs) == 0 {
		return nil // nothing escapes: dead code
	}
	// Coalescing and lane choice look at every access at once: a dim merges only if
	// it is contiguous for all of them.
	all := append(append([]*access{}, ins...), outs...)
	shape := coalesce(r.shape, all)
	lanes, flat := ewLanes(shape, all)
	var params []Param
	var args []int
	for _, v := range outRoots {
		params = append(params, g.param(roots[v], v, true))
		args = append(args, g.ids[v])
	}
	// The index type must address the largest buffer touched, which can exceed the
	// run's extent (a view into a larger root).
	extent := n
	for _, v := range inRoots {
		params = append(params, g.param(roots[v], v, false))
		args = append(args, g.ids[v])
		extent = max(extent, v.Type.Numel())
	}
	for _, v := range outRoots {
		extent = max(extent, v.Type.Numel())
	}
	// 32-bit indices where every buffer allows: integer division, which the
	// coordinate split costs per element, is much cheaper in 32 bits on the GPU.
	it := idxType(extent)
	var src strings.Builder
	fmt.Fprintf(&src, "// fused elementwise over %s: %s\n", tensor.ShapeString(r.shape), strings.Join(ops, ", "))
	// 256 threads a block, the launch flatGrid plans; @KERNEL@ is replaced by the
	// kernel's content-addressed name when the kernel is emitted.
	fmt.Fprintf(&src, "extern \"C\" __global__ void __launch_bounds__(256) @KERNEL@(%s) {\n", signature(params))
	groups := n / lanes
	// A grid-stride loop: the grid is capped (flatGrid), so one launch covers
	// any n, each thread stepping by the whole grid.
	if lanes == 1 {
		src.WriteString(gridStride(it, n))
		src.WriteString(ewScalar(it, shape, ins, outs, outVar, body.String()))
		src.WriteString("  }\n")
	} else {
		// The vector loop walks groups of L elements; i is the first element of
		// group g, a multiple of L, which is what keeps 16-byte accesses aligned.
		fmt.Fprintf(&src, "  for (%s g = (%s)blockIdx.x * blockDim.x + threadIdx.x; g < (%s)%d; g += (%s)gridDim.x * blockDim.x) {\n",
			it, it, it, groups, it)
		fmt.Fprintf(&src, "    const %s i = g * %d;\n", it, lanes)
		src.WriteString(ewVector(it, lanes, shape, ins, outs, outVar, body.String()))
		src.WriteString("  }\n")
		if flat && n%lanes != 0 {
			// The scalar tail of a flat run.
			fmt.Fprintf(&src, "  for (%s i = (%s)%d + (%s)blockIdx.x * blockDim.x + threadIdx.x; i < (%s)%d; i += (%s)gridDim.x * blockDim.x) {\n",
				it, it, groups*lanes, it, it, n, it)
			src.WriteString(ewScalar(it, shape, ins, outs, outVar, body.String()))
			src.WriteString("  }\n")
		}
	}
	src.WriteString("}\n")
	// One thread a group; at least one block even for a run smaller than L.
	grid, block := flatGrid(max(groups, 1))
	// The kernel is attributed to the run's last node, where it is launched, for
	// profiles and error messages.
	saved := g.node
	g.node = r.last
	g.emit(kernelSpec{op: "elementwise", body: src.String(), grid: grid, block: block,
		params: params, args: args})
	g.node = saved
	return nil
}

// coalesce merges adjacent dims of shape that every access walks contiguously
// (st[j] = st[j+1]·shape[j+1]) and drops dims of size 1, rewriting the accesses'
// strides; fewer dims mean fewer divisions per element.
func coalesce(shape []int64, as []*access) []int64 {
	var out []int64
	sts := make([][]int64, len(as))
	// Dims of size 1 carry no index: skipping them lets the dims on either side
	// merge.
	for j, d := range shape {
		if d == 1 {
			continue
		}
		if k := len(out) - 1; k >= 0 {
			// Merge dim j into the previous kept dim only when every access steps by the
			// previous stride = this stride × d, i.e. the two dims are one contiguous run.
			merge := true
			for i, a := range as {
				merge = merge && sts[i][k] == a.st[j]*d
			}
			if merge {
				out[k] *= d
				for i, a := range as {
					sts[i][k] = a.st[j]
				}
				continue
			}
		}
		out = append(out, d)
		for i, a := range as {
			sts[i] = append(sts[i], a.st[j])
		}
	}
	for i, a := range as {
		a.st = sts[i]
	}
	return out
}

// ewLanes picks the lanes per thread of a run over shape (coalesced) and each
// access's mode: 8 when any buffer is bf16, else 4, when every buffer is f32 or
// bf16 and either the rows (the last dim) are a multiple of the lanes, or the
// run is flat (one dim, every access contiguous or a scalar), with a scalar tail
// then. Otherwise 1: a plain scalar kernel. A 16-byte access needs a unit stride
// along the row and every other stride and the offset a multiple of the lanes
// (arena buffers are 256-byte aligned, ArenaAlign).
func ewLanes(shape []int64, as []*access) (lanes int64, flat bool) {
	// One lane count for the whole kernel: 4 f32 or 8 bf16 elements each fill one
	// 16-byte access, and a mixed run takes 8 so the bf16 side stays vectorised.
	lanes = 4
	for _, a := range as {
		switch a.dt {
		case tensor.BF16:
			lanes = 8
		// f32 keeps the lane count; any other dtype (f16, integers, bool) has no
		// 16-byte path in the prelude (lcc_ld16 and lcc_st16 take float and bf16).
		case tensor.F32:
		default:
			return 1, false
		}
	}
	// A 0-d run (every dim coalesced away or a scalar) has one element; nothing to vectorise.
	if len(shape) == 0 {
		return 1, false
	}
	last := len(shape) - 1
	// Rows that are not whole vectors can still go L at a time when the run is one
	// flat dim (no rows to straddle): vectors cover the bulk, a scalar tail the rest.
	if shape[last]%lanes != 0 {
		if last != 0 {
			return 1, false
		}
		for _, a := range as {
			if a.st[0] > 1 || a.st[0] == 1 && a.off%lanes != 0 {
				return 1, false
			}
		}
		flat = true
	}
	for _, a := range as {
		// 16-byte alignment of every vector: the arena aligns buffers to 256 bytes,
		// so a vector is aligned when its element offset is a multiple of L, along
		// the row (i is) and on every outer dim (the strides are).
		aligned := a.off%lanes == 0
		for _, s := range a.st[:last] {
			aligned = aligned && s%lanes == 0
		}
		switch {
		// A value broadcast along the row is loaded once per vector step and shared.
		case a.st[last] == 0:
			a.mode = bcastMode
		case a.st[last] == 1 && aligned:
			a.mode = vecAccess
		default:
			a.mode = lanesMode
		}
	}
	return lanes, flat
}

// ewOffset renders access a's element offset at coordinates c (or at flat
// index i when the run has one dim).
func ewOffset(a *access, shape []int64) string {
	var terms []string
	if a.off != 0 {
		terms = append(terms, fmt.Sprint(a.off))
	}
	// One dim: the flat index is the coordinate, so no divisions at all.
	if len(shape) == 1 {
		switch s := a.st[0]; s {
		case 0:
		case 1:
			terms = append(terms, "i")
		default:
			terms = append(terms, fmt.Sprintf("i * %d", s))
		}
	} else if o := offset("c", a.st); o != "0" {
		terms = append(terms, o)
	}
	if len(terms) == 0 {
		return "0"
	}
	return strings.Join(terms, " + ")
}

// ewCoords splits i into coordinates when the run has more than one dim.
// A one-dim run indexes with i directly: no division at all.
func ewCoords(it string, shape []int64) string {
	if len(shape) <= 1 {
		return ""
	}
	return coords("c", "i", it, shape)
}

// ewScalar is the loop body of one element at index i.
func ewScalar(it string, shape []int64, ins, outs []*access, outVar map[*access]string, body string) string {
	var sb strings.Builder
	sb.WriteString(ewCoords(it, shape))
	// load widens the stored dtype to the compute type (bf16 to float), store
	// narrows back; body reads the inputs as x0, x1, ... and leaves the results
	// in the registers outVar names.
	for k, a := range ins {
		fmt.Fprintf(&sb, "    const %s x%d = %s;\n", computeC[a.v.Type.DType], k,
			load(a.dt, fmt.Sprintf("%s[%s]", a.param, ewOffset(a, shape))))
	}
	sb.WriteString(body)
	for _, a := range outs {
		fmt.Fprintf(&sb, "    %s[%s] = %s;\n", a.param, ewOffset(a, shape), store(a.dt, outVar[a]))
	}
	return sb.String()
}

// ewVector is the loop body of L elements from index i (a multiple of L), the
// computation unrolled over lanes in registers.
func ewVector(it string, lanes int64, shape []int64, ins, outs []*access, outVar map[*access]string, body string) string {
	var sb strings.Builder
	sb.WriteString(ewCoords(it, shape))
	last := len(shape) - 1
	for k, a := range ins {
		off := ewOffset(a, shape)
		switch a.mode {
		case bcastMode:
			fmt.Fprintf(&sb, "    const float a%d = %s;\n", k, load(a.dt, fmt.Sprintf("%s[%s]", a.param, off)))
		case vecAccess:
			fmt.Fprintf(&sb, "    float a%d[%d];\n", k, lanes)
			// 16 bytes hold 4 f32 or 8 bf16: a bf16 run of 8 lanes is one load per bf16
			// buffer, two per f32 buffer.
			for q := int64(0); q < lanes; q += 16 / int64(a.dt.Size()) {
				fmt.Fprintf(&sb, "    lcc_ld16(%s + %s, %s);\n", a.param, plus(off, q), plus(fmt.Sprintf("a%d", k), q))
			}
		default:
			fmt.Fprintf(&sb, "    float a%d[%d];\n", k, lanes)
			// Not contiguous or not aligned: L scalar loads along the row's stride.
			fmt.Fprintf(&sb, "#pragma unroll\n    for (int k = 0; k < %d; ++k) a%d[k] = %s;\n", lanes, k,
				load(a.dt, fmt.Sprintf("%s[%s + k * %d]", a.param, off, a.st[last])))
		}
	}
	for k := range outs {
		fmt.Fprintf(&sb, "    float o%d[%d];\n", k, lanes)
	}
	// The member expressions are emitted once and unrolled over lanes, so the
	// vector body reuses the scalar body's text unchanged.
	fmt.Fprintf(&sb, "#pragma unroll\n    for (int k = 0; k < %d; ++k) {\n", lanes)
	for k, a := range ins {
		if a.mode == bcastMode {
			fmt.Fprintf(&sb, "    const float x%d = a%d;\n", k, k)
		} else {
			fmt.Fprintf(&sb, "    const float x%d = a%d[k];\n", k, k)
		}
	}
	sb.WriteString(body)
	for k, a := range outs {
		fmt.Fprintf(&sb, "    o%d[k] = %s;\n", k, outVar[a])
	}
	sb.WriteString("    }\n")
	for k, a := range outs {
		off := ewOffset(a, shape)
		switch a.mode {
		case vecAccess:
			for q := int64(0); q < lanes; q += 16 / int64(a.dt.Size()) {
				fmt.Fprintf(&sb, "    lcc_st16(%s + %s, %s);\n", a.param, plus(off, q), plus(fmt.Sprintf("o%d", k), q))
			}
		default: // an output is never broadcast
			fmt.Fprintf(&sb, "#pragma unroll\n    for (int k = 0; k < %d; ++k) %s[%s + k * %d] = %s;\n", lanes,
				a.param, off, a.st[last], store(a.dt, fmt.Sprintf("o%d[k]", k)))
		}
	}
	return sb.String()
}

// plus renders off + q, leaving out q = 0.
func plus(off string, q int64) string {
	if q == 0 {
		return off
	}
	return fmt.Sprintf("%s + %d", off, q)
}
