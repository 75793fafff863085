package passes

import (
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// This file classifies the masks of exported attention. Exporters write the causal
// mask in many ways (Trilu of ones, a bool buffer sliced per length, an additive
// matrix of −inf or of float32's minimum, HF's _prepare_4d_causal_attention_mask),
// and after ONNX import the small ones are already constants. Two classifiers
// look at each mask: a symbolic proof from the structure of its subgraph, which
// holds at any length (attention_mask_prove.go), and, where the mask is small
// enough, evaluation on the CPU interpreter, whose visible set is compared with
// the causal and sliding-window patterns (docs/design.md §4). Where both apply
// they must agree. A sliding-window mask (Mistral's, Qwen2's and Gemma2's local
// layers: the causal band cut W keys back) becomes the op's window attribute.

// maskKind is what a mask hides.
type maskKind uint8

const (
	maskNone     maskKind = iota // every key visible to every query
	maskCausal                   // key j visible to query t iff j ≤ t (needs T = S)
	maskWindow                   // ... iff t − W < j ≤ t, 1 ≤ W < T (ir/window.go; needs T = S)
	maskExplicit                 // anything else, or not known until run time
)

func (k maskKind) String() string {
	return [...]string{maskNone: "none", maskCausal: "causal", maskWindow: "window",
		maskExplicit: "explicit"}[k]
}

// maskClass is what a mask hides: its kind and, for maskWindow, the window W. A
// window as wide as the sequence cuts no key and is maskCausal, so that the two
// classifiers agree on one spelling of each visible set.
type maskClass struct {
	kind   maskKind
	window int64
}

var (
	classNone     = maskClass{kind: maskNone}
	classCausal   = maskClass{kind: maskCausal}
	classExplicit = maskClass{kind: maskExplicit}
)

// windowClass is the class of "key j visible to query t iff t − w < j ≤ t" over t
// queries: a window, or causal when w ≥ t.
func windowClass(w, t int64) maskClass {
	if w >= t {
		return classCausal
	}
	return maskClass{kind: maskWindow, window: w}
}

func (c maskClass) String() string {
	if c.kind == maskWindow {
		return fmt.Sprintf("window=%d", c.window)
	}
	return c.kind.String()
}

// maskedScore is the threshold below which an additive mask entry (or a where
// fill value) hides its key: exp(s + m − max) is exactly 0 in float32 and
// float64 for any real score s, which is how exporters use −inf and
// torch.finfo(float32).min interchangeably.
const maskedScore = -1e30

// DefaultMaskEvalLimit caps the elements of any value of a mask subgraph that
// match-attention evaluates directly (4096², a few hundred MB of float64); larger
// masks are classified by the symbolic proof alone.
const DefaultMaskEvalLimit = 1 << 24

// maskEval evaluates constant subgraphs, caching results for masks that several
// layers share.
type maskEval struct {
	limit int64
	cache map[*ir.Value]*tensor.Tensor
	done  map[*ir.Value]bool
}

func newMaskEval(limit int64) *maskEval {
	if limit <= 0 {
		limit = DefaultMaskEvalLimit
	}
	return &maskEval{limit: limit, cache: map[*ir.Value]*tensor.Tensor{}, done: map[*ir.Value]bool{}}
}

// subgraph returns the nodes v depends on, in topological order, or ok = false if
// v depends on a run-time parameter (an input, a label, a weight without data).
func subgraph(v *ir.Value) (nodes []*ir.Node, ok bool) {
	seen := map[*ir.Node]bool{}
	var visit func(v *ir.Value) bool
	visit = func(v *ir.Value) bool {
		if v.Param != nil {
			return v.Param.Data != nil
		}
		n := v.Def
		if seen[n] {
			return true
		}
		seen[n] = true
		for _, a := range n.Args {
			if !visit(a) {
				return false
			}
		}
		nodes = append(nodes, n)
		return true
	}
	ok = visit(v)
	return nodes, ok
}

// value evaluates v if it is computed from constants and weights with data alone
// and every value on the way has at most limit elements; otherwise it returns nil.
func (e *maskEval) value(v *ir.Value) *tensor.Tensor {
	if e.done[v] {
		return e.cache[v]
	}
	e.done[v] = true
	if v.Param != nil {
		e.cache[v] = v.Param.Data
		return v.Param.Data
	}
	nodes, ok := subgraph(v)
	if !ok {
		return nil
	}
	for _, n := range nodes {
		for _, r := range n.Results {
			if r.Type.Numel() > e.limit {
				return nil
			}
		}
	}
	vals, err := evalNodes(nodes, nil)
	if err != nil {
		return nil
	}
	e.cache[v] = vals[v]
	return vals[v]
}

// evalNodes runs nodes (in topological order) on the CPU interpreter in float64;
// sub maps values to replacement tensors (leaves of a shrunk graph).
func evalNodes(nodes []*ir.Node, sub map[*ir.Value]*tensor.Tensor) (
	map[*ir.Value]*tensor.Tensor, error) {
	vals := map[*ir.Value]*tensor.Tensor{}
	for k, t := range sub {
		vals[k] = t
	}
	get := func(a *ir.Value) *tensor.Tensor {
		if t, ok := vals[a]; ok {
			return t
		}
		return a.Param.Data
	}
	for _, n := range nodes {
		args := make([]*tensor.Tensor, len(n.Args))
		for i, a := range n.Args {
			args[i] = get(a)
		}
		res, err := interp.EvalNode(n, args, interp.Options{Precision: tensor.F64})
		if err != nil {
			return nil, err
		}
		for i, r := range n.Results {
			vals[r] = res[i]
		}
	}
	return vals, nil
}

// unitReshape reports whether a reshape from a to b only inserts or drops unit dims.
func unitReshape(a, b []int64) bool {
	strip := func(s []int64) []int64 {
		var out []int64
		for _, d := range s {
			if d != 1 {
				out = append(out, d)
			}
		}
		return out
	}
	x, y := strip(a), strip(b)
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// classify says what a mask hides, given its evaluated tensor (nil if unknown)
// and how its elements map to visibility: visible(i) reports whether element i
// shows its key, and pure is false when some element is neither a plain show nor
// a plain hide (an additive bias such as ALiBi). t and s are the sizes of the
// query and key axes the mask's last two dims broadcast to.
func classify(m *tensor.Tensor, visible func(i int) (vis, pure bool), t, s int64) maskClass {
	if m == nil {
		return classExplicit
	}
	r := len(m.Shape)
	rows, cols := int64(1), int64(1)
	if r >= 1 {
		cols = m.Shape[r-1]
	}
	if r >= 2 {
		rows = m.Shape[r-2]
	}
	all, causal := true, t == s && (rows == t || t == 1) && (cols == s || s == 1)
	// lo is the least δ = col − row of a visible element: a window's visible set
	// is exactly lo ≤ δ ≤ 0, W = 1 − lo, which the second walk below checks.
	lo := int64(1)
	for i := 0; i < m.Numel(); i++ {
		vis, pure := visible(i)
		if !pure {
			return classExplicit
		}
		all = all && vis
		row, col := int64(i)/cols%rows, int64(i)%cols
		causal = causal && vis == (col <= row)
		if vis {
			lo = min(lo, col-row)
		}
	}
	switch {
	case all:
		return classNone
	case causal:
		return classCausal
	case t != s || rows != t || cols != s || lo > 0:
		return classExplicit
	}
	for i := 0; i < m.Numel(); i++ {
		vis, _ := visible(i)
		if d := int64(i)%cols - int64(i)/cols%rows; vis != (lo <= d && d <= 0) {
			return classExplicit
		}
	}
	return windowClass(1-lo, t)
}

// additiveVisible reads an additive mask entry: 0 shows a key, maskedScore or
// less hides it, and anything else is a bias, not a mask (pure is false).
func additiveVisible(x float64) (vis, pure bool) {
	switch {
	case x == 0:
		return true, true
	case x <= maskedScore:
		return false, true
	}
	return false, false
}

// uniformScalar returns the value every element of v has when v is a constant,
// full, a weight with data of one element, or an expand of one of those.
func uniformScalar(v *ir.Value) (float64, bool) {
	for v.Def != nil && v.Def.Op == ir.OpExpand {
		v = v.Def.Args[0]
	}
	var t *tensor.Tensor
	switch {
	case v.Param != nil:
		// A one-element weight is how exporters store a folded scale; a larger one,
		// even if uniform today, is a trainable tensor.
		if t = v.Param.Data; t != nil && t.Numel() != 1 {
			return 0, false
		}
	case v.Def.Op == ir.OpConstant:
		t = v.Def.AttrTensor("value")
	case v.Def.Op == ir.OpFull:
		return v.Def.AttrFloat("value"), true
	}
	if t == nil || t.Numel() == 0 || !t.DType.IsFloat() {
		return 0, false
	}
	x := t.F[0]
	for _, y := range t.F {
		if y != x && !(math.IsNaN(x) && math.IsNaN(y)) {
			return 0, false
		}
	}
	return x, true
}
