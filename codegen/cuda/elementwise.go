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

const geluTanhExpr = "lcc_gelu_tanh($0)"

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
		return fmt.Sprintf("(%s)(%s)", computeC[to], x)
	}
}

// exprOf renders node n over operand expressions.
func exprOf(n *ir.Node, operands []string) (string, error) {
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
	if !ok {
		return "", fmt.Errorf("no %v form of elementwise op %s", dt, n.Op)
	}
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

func (r *fusion) accepts(n *ir.Node) bool {
	return len(r.nodes) == 0 || slices.Equal(r.shape, n.Result().Type.Shape)
}

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

// elementwise renders a run as one kernel. Values read outside the run (or
// returned) are stored; the rest live in registers.
func (g *gen) elementwise(r *fusion) error {
	members := map[*ir.Node]bool{}
	for _, n := range r.nodes {
		members[n] = true
	}
	n := prod(r.shape)
	it := idxType(n)
	var params []Param
	var args []int
	var body strings.Builder
	local := map[*ir.Value]string{}
	var ops []string
	// Inputs first (loaded once each), then the nodes in order.
	inputs := map[*ir.Value]string{}
	needCoords := false
	var loads strings.Builder
	for _, m := range r.nodes {
		for _, a := range m.Args {
			if r.produced[a] || inputs[a] != "" || local[a] != "" {
				continue
			}
			if v, ok := inlinable(a); ok {
				local[a] = literal(a.Type.DType, v)
				continue
			}
			name := fmt.Sprintf("in%d", len(inputs))
			inputs[a] = name
			params = append(params, g.param(name, a, false))
			args = append(args, g.ids[a])
			off := "i"
			switch {
			case a.Type.Numel() == 1:
				off = "0"
			case !slices.Equal(a.Type.Shape, r.shape):
				off = offset("c", bcastStrides(a.Type.Shape, r.shape))
				needCoords = true
			}
			x := fmt.Sprintf("x%d", len(inputs)-1)
			fmt.Fprintf(&loads, "    const %s %s = %s;\n", computeC[a.Type.DType], x,
				load(g.storageOf(a), fmt.Sprintf("%s[%s]", name, off)))
			local[a] = x
		}
	}
	var outs strings.Builder
	nout := 0
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
		stored := g.f.IsOutput(res)
		for _, u := range g.uses[res] {
			stored = stored || !members[u]
		}
		if stored {
			name := fmt.Sprintf("out%d", nout)
			nout++
			params = append([]Param{g.param(name, res, true)}, params...)
			args = append([]int{g.ids[res]}, args...)
			fmt.Fprintf(&outs, "    %s[i] = %s;\n", name, store(g.storageOf(res), v))
		}
	}
	if nout == 0 {
		return nil // nothing escapes: dead code
	}
	// Outputs were prepended in reverse; restore their order (out0 first).
	slices.Reverse(params[:nout])
	slices.Reverse(args[:nout])
	var src strings.Builder
	fmt.Fprintf(&src, "// fused elementwise over %s: %s\n", tensor.ShapeString(r.shape), strings.Join(ops, ", "))
	fmt.Fprintf(&src, "extern \"C\" __global__ void __launch_bounds__(256) @KERNEL@(%s) {\n", signature(params))
	src.WriteString(gridStride(it, n))
	if needCoords {
		src.WriteString(coords("c", "i", it, r.shape))
	}
	src.WriteString(loads.String())
	src.WriteString(body.String())
	src.WriteString(outs.String())
	src.WriteString("  }\n}\n")
	grid, block := flatGrid(n)
	saved := g.node
	g.node = r.last
	g.emit(kernelSpec{op: "elementwise", body: src.String(), grid: grid, block: block,
		params: params, args: args})
	g.node = saved
	return nil
}
