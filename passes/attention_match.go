package passes

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/ir"
)

// This file is the match-attention pass (docs/design.md §4): it finds attention that
// exporters wrote out op by op and replaces it with one `attention` op, so that
// later passes (dilate-attention, sharding, codegen) see every layer the same way.
//
// The decomposed form, in the [B,H,T,D] layout exporters use, is
//
//	p = softmax(α·(q @ kᵀ) ⊕ masks, axis=-1);  o = p @ v
//
// where α is any product of positive scalar constants applied to the scores, to q
// or to kᵀ (PyTorch's SDPA decomposition multiplies q and kᵀ by √α each), and each
// mask is Where(cond, −inf, s), Where(cond, s, −inf) or s + m. Masks are proved
// from their structure and, when small, evaluated (attention_mask*.go): a causal one
// sets the op's causal flag, a sliding-window one (−W < col − row ≤ 0, Mistral's and
// Gemma2's local layers) also its window W, an all-visible one disappears, and any
// other stays as the op's explicit mask argument. kᵀ may be a
// transpose of k in either layout or PyTorch's Reshape/Transpose/Reshape of it;
// k and v may repeat their heads for grouped-query attention (HF's repeat_kv:
// Unsqueeze, Expand, Reshape; or Tile), which is removed, since the attention op
// takes Hkv heads dividing Hq directly. q, k and v are transposed to the op's
// [B,T,H,D] layout, cancelling the exporter's own transposes where it can, and the
// result is transposed back for the old consumers, except those that themselves
// transposed it to [B,T,H,D], which read the op's result directly.

// MatchConfig configures MatchAttention.
type MatchConfig struct {
	// RequireAttention makes it an error (naming the nodes) when a softmax over
	// attention scores stays unmatched, or when the function has no attention.
	RequireAttention bool
	// MaskEvalLimit caps the elements of a mask evaluated on the CPU interpreter to
	// cross-check its symbolic classification; 0 means DefaultMaskEvalLimit. Larger
	// masks are classified by the proof alone.
	MaskEvalLimit int64
	// Result, when not nil, receives what each run found.
	Result *AttentionMatches
}

// AttentionMatches lists the attention layers of a function after match-attention.
type AttentionMatches struct {
	// Found has one entry per attention op, in body order: those the pass built
	// and those that were already there (ONNX opset-23 Attention is lowered to one
	// at import).
	Found []FoundAttention
	// Unmatched has one entry per softmax over a [.., T, S] score tensor (computed
	// by a matmul of two activations) that was left as it was.
	Unmatched []UnmatchedAttention
}

// UnmatchedNames returns the softmax node names of the unmatched subgraphs.
func (m *AttentionMatches) UnmatchedNames() []string {
	var names []string
	for _, u := range m.Unmatched {
		names = append(names, u.Softmax)
	}
	return names
}

// FoundAttention describes one attention op.
type FoundAttention struct {
	// Node is the name of the attention op (for a matched subgraph, the name of
	// the matmul by v, which PyTorch names after scaled_dot_product_attention).
	Node string
	// Form is "decomposed" when the pass built the op, "attention" or
	// "dilated_attention" when it was already there.
	Form string
	// Causal is the op's causal flag.
	Causal bool
	// Window is the op's sliding window W (query t sees keys t−W < j ≤ t; ir.Window),
	// 0 without one.
	Window int64
	// Mask is "" without an explicit mask, else "bool" or "additive".
	Mask string
	// Scale multiplies q·kᵀ.
	Scale float64
	// QHeads and KVHeads are the head counts (KVHeads < QHeads for grouped-query).
	QHeads, KVHeads int64
	// Nodes names the source nodes a decomposed layer spanned, from the score
	// matmul to the matmul by v.
	Nodes []string
}

// UnmatchedAttention describes a softmax over attention scores that was not
// converted, and why.
type UnmatchedAttention struct {
	Softmax string
	// Nodes names the nodes from the score matmul to the softmax.
	Nodes  []string
	Reason string
}

// matchAttentionDefault makes the pass known to `lcc passes` and --print-ir-after.
var _ = RegisterConfigurable(MatchAttention(MatchConfig{}), func(a *Args) (Pass, error) {
	return MatchAttention(MatchConfig{RequireAttention: a.Bool("require", false),
		MaskEvalLimit: a.Int("mask-eval-limit", 0)}), nil
})

// MatchAttention returns the match-attention pass.
func MatchAttention(cfg MatchConfig) Pass {
	return Pass{Name: "match-attention",
		Doc: "replace exported attention (matmul, scale, mask, softmax, matmul) by attention ops",
		Run: func(f *ir.Func) error {
			res, err := FindAttention(f, cfg)
			if cfg.Result != nil && res != nil {
				*cfg.Result = *res
			}
			return err
		}}
}

// FindAttention runs match-attention on f and returns what it found. With
// cfg.RequireAttention an unmatched subgraph or a function without attention is
// an error; the returned matches are valid either way.
func FindAttention(f *ir.Func, cfg MatchConfig) (*AttentionMatches, error) {
	m := &attnMatcher{masks: newMaskEval(cfg.MaskEvalLimit), prover: newMaskProver(), reasons: map[*ir.Node]string{},
		found: map[*ir.Node]FoundAttention{}}
	patterns := []Pattern{
		// matmul(softmax(α·q·kᵀ ⊕ masks), v) -> attention(q, k, v, [mask]) {causal, scale=α}
		{Name: "sdpa", Root: ir.OpMatMul, Rewrite: m.rewrite},
	}
	if _, err := ApplyPatterns(f, patterns, 0); err != nil {
		return nil, err
	}
	res := m.report(f)
	if cfg.RequireAttention {
		if len(res.Unmatched) > 0 {
			var parts []string
			for _, u := range res.Unmatched {
				parts = append(parts, fmt.Sprintf("softmax %q: %s", u.Softmax, u.Reason))
			}
			return res, fmt.Errorf("--require-attention: %d attention subgraph(s) not matched: %s",
				len(res.Unmatched), strings.Join(parts, "; "))
		}
		if len(res.Found) == 0 {
			return res, fmt.Errorf("--require-attention: no attention found in @%s", f.Name)
		}
	}
	return res, nil
}

// attnMatcher holds one run's state.
type attnMatcher struct {
	masks   *maskEval
	prover  *maskProver
	reasons map[*ir.Node]string // why a softmax's subgraph did not match
	found   map[*ir.Node]FoundAttention
}

// view is transpose(src, perm): a value seen through a permutation, so that the
// exporter's transposes can be composed and cancelled before any node is built.
type view struct {
	src  *ir.Value
	perm []int64
}

func identity(rank int) []int64 {
	p := make([]int64, rank)
	for i := range p {
		p[i] = int64(i)
	}
	return p
}

// then returns transpose(w, p).
func (w view) then(p []int64) view {
	out := make([]int64, len(p))
	for i, j := range p {
		out[i] = w.perm[j]
	}
	return view{src: w.src, perm: out}
}

func (w view) shape() []int64 {
	s := make([]int64, len(w.perm))
	for i, p := range w.perm {
		s[i] = w.src.Type.Shape[p]
	}
	return s
}

func (w view) isIdentity() bool { return slices.Equal(w.perm, identity(len(w.perm))) }

// materialize builds w, as one transpose at most.
func materialize(b *ir.Builder, w view) *ir.Value {
	if w.isIdentity() {
		return w.src
	}
	return b.Transpose(w.src, w.perm...)
}

var (
	swapLast = []int64{0, 1, 3, 2} // [B,H,X,Y] <-> [B,H,Y,X]
	swapHT   = []int64{0, 2, 1, 3} // [B,H,T,D] <-> [B,T,H,D]
)

// peel looks through transposes (and PyTorch's Reshape/Transpose/Reshape form of
// a last-two-dims transpose) and, when alpha is not nil, positive scalar factors,
// which it multiplies into *alpha. It appends the nodes it looked through to *seen.
func peel(v *ir.Value, alpha *float64, seen *[]*ir.Node) view {
	w := view{src: v, perm: identity(v.Type.Rank())}
	for {
		d := w.src.Def
		if d == nil {
			return w
		}
		switch {
		case d.Op == ir.OpTranspose:
			w = view{src: d.Args[0], perm: view{perm: d.AttrInts("perm")}.then(w.perm).perm}
		case alpha != nil && (d.Op == ir.OpMul || d.Op == ir.OpDiv):
			c, x, ok := scalarFactor(d)
			if !ok {
				return w
			}
			*alpha *= c
			w.src = x
		case d.Op == ir.OpReshape && w.src.Type.Rank() == 4:
			u, ok := bracketedTranspose(d)
			if !ok {
				return w
			}
			w = view{src: u, perm: view{perm: swapLast}.then(w.perm).perm}
			*seen = append(*seen, d.Args[0].Def, d.Args[0].Def.Args[0].Def)
		default:
			return w
		}
		*seen = append(*seen, d)
	}
}

// scalarFactor reads x·c, c·x or x/c with c a positive uniform constant that does
// not broadcast x, returning the factor (1/c for a division) and x.
func scalarFactor(d *ir.Node) (c float64, x *ir.Value, ok bool) {
	out := d.Result().Type
	for i := range 2 {
		if d.Op == ir.OpDiv && i == 1 {
			break
		}
		s, okS := uniformScalar(d.Args[1-i])
		if !okS || !(s > 0) || math.IsInf(s, 0) || !d.Args[i].Type.SameShape(out) {
			continue
		}
		if d.Op == ir.OpDiv {
			s = 1 / s
		}
		return s, d.Args[i], true
	}
	return 0, nil, false
}

// bracketedTranspose recognises reshape(transpose(reshape(u, [B·H,Y,X]), [0,2,1]),
// [B,H,X,Y]) for u of shape [B,H,Y,X], which PyTorch's exporter writes for kᵀ.
func bracketedTranspose(r *ir.Node) (*ir.Value, bool) {
	a := r.Args[0]
	if a.Def == nil || a.Def.Op != ir.OpTranspose || a.Type.Rank() != 3 ||
		!slices.Equal(a.Def.AttrInts("perm"), []int64{0, 2, 1}) {
		return nil, false
	}
	c := a.Def.Args[0]
	if c.Def == nil || c.Def.Op != ir.OpReshape || c.Def.Args[0].Type.Rank() != 4 {
		return nil, false
	}
	u := c.Def.Args[0]
	us, out := u.Type.Shape, r.Result().Type.Shape
	if us[0] != out[0] || us[1] != out[1] || us[2] != out[3] || us[3] != out[2] {
		return nil, false
	}
	return u, true
}

// repeatKind is how k and v repeat their heads for grouped-query attention.
type repeatKind uint8

const (
	repeatNone repeatKind = iota
	// repeatInterleave gives query head h the kv head h/g (HF repeat_kv, Expand),
	// which is the attention op's own grouping.
	repeatInterleave
	// repeatTile gives query head h the kv head h mod Hkv (Tile on the head axis),
	// which needs the query heads permuted around the op.
	repeatTile
)

// stripRepeat recognises a head repeat of w (in [B,H,S,D], seen without
// permutation) and returns the unrepeated view, how it repeated, and the group
// size g = H / Hkv.
func stripRepeat(w view, seen *[]*ir.Node) (view, repeatKind, int64) {
	if !w.isIdentity() || w.src.Def == nil || w.src.Type.Rank() != 4 {
		return w, repeatNone, 1
	}
	d, s := w.src.Def, w.src.Type.Shape
	switch d.Op {
	case ir.OpReshape:
		// reshape(expand|tile(reshape(x, [B,Hkv,1,S,D]), [B,Hkv,g,S,D]), [B,H,S,D])
		e := d.Args[0]
		es := e.Type.Shape
		if e.Def == nil || len(es) != 5 || es[0] != s[0] || es[1]*es[2] != s[1] ||
			es[3] != s[2] || es[4] != s[3] {
			break
		}
		u := e.Def.Args[0]
		switch {
		case e.Def.Op == ir.OpExpand:
		case e.Def.Op == ir.OpTile &&
			slices.Equal(e.Def.AttrInts("repeats"), []int64{1, 1, es[2], 1, 1}):
		default:
			return w, repeatNone, 1
		}
		us := u.Type.Shape
		if len(us) != 5 || us[1] != es[1] || us[2] != 1 || u.Def == nil || u.Def.Op != ir.OpReshape ||
			u.Def.Args[0].Type.Rank() != 4 {
			break
		}
		x := u.Def.Args[0]
		if xs := x.Type.Shape; xs[0] != s[0] || xs[1] != es[1] || xs[2] != s[2] || xs[3] != s[3] {
			break
		}
		*seen = append(*seen, d, e.Def, u.Def)
		return peel(x, nil, seen), repeatInterleave, es[2]
	case ir.OpTile:
		r := d.AttrInts("repeats")
		if r[0] != 1 || r[2] != 1 || r[3] != 1 || r[1] <= 1 {
			break
		}
		*seen = append(*seen, d)
		return peel(d.Args[0], nil, seen), repeatTile, r[1]
	case ir.OpExpand:
		// Multi-query attention: one kv head broadcast to every query head.
		x := d.Args[0]
		xs := x.Type.Shape
		if len(xs) == 4 && xs[0] == s[0] && xs[1] == 1 && xs[2] == s[2] && xs[3] == s[3] {
			*seen = append(*seen, d)
			return peel(x, nil, seen), repeatInterleave, s[1]
		}
	}
	return w, repeatNone, 1
}

// sdpaMatch is one decomposed attention, ready to be rebuilt.
type sdpaMatch struct {
	pv      *ir.Node
	nodes   []*ir.Node
	q, k, v view // q in [B,H,T,D], k and v in [B,Hkv,S,D]
	repeat  repeatKind
	group   int64
	scale   float64
	causal  bool
	window  int64     // the sliding window W, 0 for none (needs causal)
	mask    *ir.Value // explicit mask in [B,H,T,S] broadcast form, or nil
	maskNot bool      // the mask is a where condition that hides where true
	maskNeg bool      // the mask is subtracted from the scores
}

// rewrite is the sdpa pattern: pv is a matmul whose first argument may be a softmax.
func (m *attnMatcher) rewrite(e *Editor, pv *ir.Node, b *ir.Builder) bool {
	p, _ := nanGuarded(pv.Args[0])
	if p.Def == nil || p.Def.Op != ir.OpSoftmax {
		return false
	}
	a, reason := m.analyze(e, pv)
	if a == nil {
		m.reasons[p.Def] = reason
		return false
	}
	m.emit(e, b, a)
	return true
}

// nanGuarded sees through PyTorch's SDPA decomposition, which zeroes the NaN rows
// a fully masked softmax gives: where(isnan(p), 0, p) -> p. That is what the
// attention op does for a row with no visible key, so the guard folds into it.
// It returns p and the guard's nodes (where, isnan), or v itself and nil.
func nanGuarded(v *ir.Value) (*ir.Value, []*ir.Node) {
	w := v.Def
	if w == nil || w.Op != ir.OpWhere {
		return v, nil
	}
	cond, zero, p := w.Args[0], w.Args[1], w.Args[2]
	isn := cond.Def
	if isn == nil || isn.Op != ir.OpIsNaN || isn.Args[0] != p || zero.Def == nil ||
		zero.Def.Op != ir.OpConstant || zero.Type.Numel() != 1 || zero.Def.AttrTensor("value").Float(0) != 0 {
		return v, nil
	}
	return p, []*ir.Node{w, isn}
}

// analyze matches the subgraph ending at pv, or says why it does not match.
// It builds nothing.
func (m *attnMatcher) analyze(e *Editor, pv *ir.Node) (
	*sdpaMatch, string) {
	p, guard := nanGuarded(pv.Args[0])
	sm := p.Def
	if p.Type.Rank() != 4 {
		return nil, fmt.Sprintf("scores %v are not [B,H,T,S]", p.Type)
	}
	if ax, err := ir.AxisIndex(sm.AttrInt("axis"), 4); err != nil || ax != 3 {
		return nil, "softmax is not over the last axis"
	}
	if pv.AttrBool("transpose_a") {
		return nil, "the probabilities enter the matmul by v transposed"
	}
	wantUses := 1
	if guard != nil {
		wantUses = 2 // the isnan and the where of the guard
		g := pv.Args[0]
		if !e.ReadOnce(g) || e.NumUses(guard[1].Result()) != 1 {
			return nil, "the attention probabilities are used elsewhere"
		}
	}
	if e.NumUses(p) != wantUses || e.IsOutput(p) {
		return nil, "the attention probabilities are used elsewhere"
	}
	shape := p.Type.Shape
	bsz, h, t, s := shape[0], shape[1], shape[2], shape[3]
	a := &sdpaMatch{pv: pv, nodes: append([]*ir.Node{pv, sm}, guard...), scale: 1}

	// Walk from the softmax to the score matmul, collecting scale and mask layers.
	type layer struct {
		factor  float64 // a scale layer when non-zero
		node    *ir.Node
		mask    *ir.Value
		where   bool // mask is a where condition ...
		hide    bool // ... that hides keys where true
		negated bool // mask is subtracted
	}
	var layers []layer
	x := sm.Args[0]
	for {
		if len(layers) > 16 {
			return nil, "too many ops between the score matmul and the softmax"
		}
		d := x.Def
		if d == nil {
			return nil, "the softmax input is a parameter"
		}
		if !x.Type.SameShape(p.Type) {
			return nil, fmt.Sprintf("%s has shape %v, not the scores' %v", d.Where(), x.Type.Shape, shape)
		}
		a.nodes = append(a.nodes, d)
		if d.Op == ir.OpMatMul {
			break
		}
		switch d.Op {
		case ir.OpMul, ir.OpDiv:
			c, y, ok := scalarFactor(d)
			if !ok {
				return nil, fmt.Sprintf("%s does not scale the scores by a positive constant", d.Where())
			}
			layers = append(layers, layer{factor: c, node: d})
			x = y
		case ir.OpAdd, ir.OpSub:
			i, ok := m.scoreOperand(d)
			if !ok || (d.Op == ir.OpSub && i != 0) {
				return nil, fmt.Sprintf("%s: cannot tell the scores from the mask", d.Where())
			}
			layers = append(layers, layer{node: d, mask: d.Args[1-i], negated: d.Op == ir.OpSub})
			x = d.Args[i]
		case ir.OpWhere:
			fa, okA := uniformScalar(d.Args[1])
			fb, okB := uniformScalar(d.Args[2])
			switch {
			case okA && fa <= maskedScore && scoreChain(d.Args[2]) != nil:
				layers = append(layers, layer{node: d, mask: d.Args[0], where: true, hide: true})
				x = d.Args[2]
			case okB && fb <= maskedScore && scoreChain(d.Args[1]) != nil:
				layers = append(layers, layer{node: d, mask: d.Args[0], where: true})
				x = d.Args[1]
			default:
				return nil, fmt.Sprintf("%s is not a mask: neither branch is a −inf fill", d.Where())
			}
		default:
			return nil, fmt.Sprintf("%s between the score matmul and the softmax is not a scale or a mask",
				d.Where())
		}
	}
	qk := x.Def
	if !isActivation(qk.Args[0]) || !isActivation(qk.Args[1]) {
		return nil, fmt.Sprintf("%s multiplies by a constant or weight, not q by k", qk.Where())
	}

	// Apply the layers in data-flow order: a scale after an explicit additive mask
	// would scale the mask too, which the op cannot express.
	explicitAdd := false
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		if l.factor != 0 {
			if explicitAdd {
				return nil, fmt.Sprintf("%s scales the scores after an additive mask", l.node.Where())
			}
			a.scale *= l.factor
			continue
		}
		class := m.classifyMask(l.mask, l.where, l.hide, l.negated, t, s)
		switch class.kind {
		case maskCausal:
			a.causal = true
		case maskWindow:
			// Two windows (or a window and causal) intersect: the narrower one.
			a.causal = true
			if a.window == 0 || class.window < a.window {
				a.window = class.window
			}
		case maskExplicit:
			if a.mask != nil {
				return nil, fmt.Sprintf("%s is a second mask that is not causal, a sliding window or all-visible",
					l.node.Where())
			}
			if l.mask.Type.Rank() > 4 {
				return nil, fmt.Sprintf("mask %v has more dims than [B,H,T,S]", l.mask.Type)
			}
			a.mask, a.maskNot, a.maskNeg = l.mask, l.where && l.hide, l.negated
			explicitAdd = !l.where
		}
	}

	// q·kᵀ: read q as [B,H,T,D] and k as [B,Hkv,S,D] through transposes and scales.
	if qk.Args[0].Type.Rank() != 4 || qk.Args[1].Type.Rank() != 4 {
		return nil, fmt.Sprintf("%s multiplies %v by %v, not [B,H,T,D] by [B,H,D,S]", qk.Where(),
			qk.Args[0].Type, qk.Args[1].Type)
	}
	a.q = peel(qk.Args[0], &a.scale, &a.nodes)
	if qk.AttrBool("transpose_a") {
		a.q = a.q.then(swapLast)
	}
	a.k = peel(qk.Args[1], &a.scale, &a.nodes)
	if !qk.AttrBool("transpose_b") {
		a.k = a.k.then(swapLast)
	}
	if pv.Args[1].Type.Rank() != 4 {
		return nil, fmt.Sprintf("v %v is not [B,H,S,D]", pv.Args[1].Type)
	}
	a.v = peel(pv.Args[1], nil, &a.nodes)
	if pv.AttrBool("transpose_b") {
		a.v = a.v.then(swapLast)
	}
	qs, ks, vs := a.q.shape(), a.k.shape(), a.v.shape()
	if qs[0] != bsz || qs[1] != h || qs[2] != t {
		return nil, fmt.Sprintf("q %v does not give scores %v", qs, shape)
	}
	if ks[3] != qs[3] || vs[3] != qs[3] {
		return nil, fmt.Sprintf("head dims differ: q %d, k %d, v %d", qs[3], ks[3], vs[3])
	}

	// Grouped-query attention: drop the repeat when k and v repeat the same way.
	var kSeen, vSeen []*ir.Node
	k2, kr, kg := stripRepeat(a.k, &kSeen)
	v2, vr, vg := stripRepeat(a.v, &vSeen)
	// Permuting query heads for Tile would need the same permutation of a per-head mask.
	mr := 0
	if a.mask != nil {
		mr = a.mask.Type.Rank()
	}
	headMask := mr >= 3 && a.mask.Type.Shape[mr-3] != 1
	if kr != repeatNone && kr == vr && kg == vg && slices.Equal(k2.shape(), v2.shape()) &&
		!(kr == repeatTile && headMask) {
		a.k, a.v, a.repeat, a.group = k2, v2, kr, kg
		a.nodes = append(append(a.nodes, kSeen...), vSeen...)
	}
	ks, vs = a.k.shape(), a.v.shape()
	if !slices.Equal(ks, vs) || ks[0] != bsz || ks[2] != s {
		return nil, fmt.Sprintf("k %v and v %v do not fit scores %v", ks, vs, shape)
	}
	if ks[1] == 0 || h%ks[1] != 0 {
		return nil, fmt.Sprintf("%d query heads are not a multiple of %d kv heads", h, ks[1])
	}
	return a, ""
}

// classifyMask says what a mask layer hides: a where condition (hiding where
// it is true when hide), or an additive mask (subtracted when negated). The
// symbolic proof (attention_mask_prove.go) decides at any length; a mask small
// enough to evaluate is also evaluated, and the two must agree.
func (m *attnMatcher) classifyMask(mask *ir.Value, where, hide, negated bool, t, s int64) maskClass {
	var vis func(x float64) (bool, bool)
	switch {
	case where:
		vis = func(x float64) (bool, bool) { return (x != 0) != hide, true }
	case mask.Type.DType.IsFloat():
		coef := 1.0
		if negated {
			coef = -1
		}
		vis = func(x float64) (bool, bool) { return additiveVisible(x * coef) }
	default:
		return classExplicit
	}
	proved, ok := m.prover.proveMask(mask, vis, t, s)
	mt := m.masks.value(mask)
	if mt == nil {
		if ok {
			return proved
		}
		return classExplicit
	}
	evaluated := classify(mt, func(i int) (bool, bool) { return vis(mt.Float(i)) }, t, s)
	if ok && evaluated != proved {
		panic(fmt.Sprintf("lcc: BUG: mask %v of scores [%d, %d]: the symbolic proof says %v, "+
			"evaluation says %v", mask.Type, t, s, proved, evaluated))
	}
	return evaluated
}

// scoreOperand says which argument of an add or sub carries the scores (the other
// is the mask): the one computed from a matmul of activations; when both are,
// the one that is not a constant.
func (m *attnMatcher) scoreOperand(d *ir.Node) (int, bool) {
	s0, s1 := scoreChain(d.Args[0]) != nil, scoreChain(d.Args[1]) != nil
	switch {
	case s0 && !s1:
		return 0, true
	case s1 && !s0:
		return 1, true
	case s0 && s1:
		c0, c1 := m.masks.value(d.Args[0]) != nil, m.masks.value(d.Args[1]) != nil
		if c0 != c1 {
			if c0 {
				return 1, true
			}
			return 0, true
		}
	}
	return 0, false
}

// isActivation reports whether v is computed at run time from the inputs rather
// than being a constant or a weight, looking through layout changes.
func isActivation(v *ir.Value) bool {
	for v.Def != nil {
		switch v.Def.Op {
		case ir.OpReshape, ir.OpTranspose, ir.OpExpand, ir.OpCast:
			v = v.Def.Args[0]
			continue
		case ir.OpConstant, ir.OpFull, ir.OpRange:
			return false
		}
		return true
	}
	return v.Param.Role == ir.RoleInput
}

// scoreChain returns the nodes from v back to a matmul of two activations through
// scores-shaped elementwise ops (outermost first), or nil when there is none.
// It is how a softmax is recognised as attention for the unmatched report.
func scoreChain(v *ir.Value) []*ir.Node {
	var walk func(v *ir.Value, depth int) []*ir.Node
	walk = func(v *ir.Value, depth int) []*ir.Node {
		d := v.Def
		if d == nil || depth > 16 {
			return nil
		}
		switch d.Op {
		case ir.OpMatMul:
			if v.Type.Rank() >= 3 && isActivation(d.Args[0]) && isActivation(d.Args[1]) {
				return []*ir.Node{d}
			}
		case ir.OpMul, ir.OpDiv, ir.OpAdd, ir.OpSub, ir.OpWhere, ir.OpCast, ir.OpNeg:
			for _, a := range d.Args {
				if !a.Type.SameShape(v.Type) {
					continue
				}
				if c := walk(a, depth+1); c != nil {
					return append([]*ir.Node{d}, c...)
				}
			}
		}
		return nil
	}
	return walk(v, 0)
}

// emit builds the attention op for a before a.pv and redirects pv's uses.
func (m *attnMatcher) emit(e *Editor, b *ir.Builder, a *sdpaMatch) {
	q := materialize(b, a.q.then(swapHT))
	k := materialize(b, a.k.then(swapHT))
	v := materialize(b, a.v.then(swapHT))
	qs, hkv := q.Type.Shape, k.Type.Shape[2]
	permute := a.repeat == repeatTile && hkv > 1
	if permute {
		// Query head i·Hkv+j uses kv head j under Tile; the op gives head j·g+i kv
		// head j, so the query heads go in as [Hkv, g] and the output comes back.
		q = b.Reshape(q, qs[0], qs[1], a.group, hkv, qs[3])
		q = b.Transpose(q, 0, 1, 3, 2, 4)
		q = b.Reshape(q, qs...)
	}
	args := []*ir.Value{q, k, v}
	if a.mask != nil {
		mask := a.mask
		switch {
		case a.maskNot:
			mask = b.Unary(ir.OpNot, mask)
		case a.maskNeg:
			mask = b.Neg(mask)
		}
		args = append(args, mask)
	}
	attrs := ir.A("causal", a.causal, "scale", a.scale)
	if a.window > 0 {
		attrs = attrs.With("window", a.window)
	}
	outs := b.Apply(ir.OpAttention, attrs, args...)
	o := outs[0]
	if permute {
		o = b.Reshape(o, qs[0], qs[1], hkv, a.group, qs[3])
		o = b.Transpose(o, 0, 1, 3, 2, 4)
		o = b.Reshape(o, qs...)
	}
	old := a.pv.Result()
	for _, u := range slices.Clone(e.Uses(old)) {
		if u.Op == ir.OpTranspose && slices.Equal(u.AttrInts("perm"), swapHT) {
			e.Replace(u.Result(), o)
		}
	}
	e.Replace(old, b.Transpose(o, swapHT...))

	rec := FoundAttention{Node: a.pv.Name, Form: "decomposed", Causal: a.causal, Window: a.window,
		Scale: a.scale, QHeads: qs[2], KVHeads: hkv}
	if a.mask != nil {
		rec.Mask = "additive"
		if !a.mask.Type.DType.IsFloat() {
			rec.Mask = "bool"
		}
	}
	slices.SortFunc(a.nodes, e.Compare)
	for _, n := range slices.Compact(a.nodes) {
		rec.Nodes = append(rec.Nodes, n.Name)
	}
	if outs[0].Def != nil {
		m.found[outs[0].Def] = rec
	}
}

// report lists the attention ops of f and the attention-like softmaxes left.
func (m *attnMatcher) report(f *ir.Func) *AttentionMatches {
	res := &AttentionMatches{}
	for _, n := range f.Body {
		switch n.Op {
		case ir.OpAttention, ir.OpDilatedAttention:
			rec, ok := m.found[n]
			if !ok {
				q, k := n.Args[0].Type.Shape, n.Args[1].Type.Shape
				rec = FoundAttention{Node: n.Name, Form: n.Op.String(), Causal: n.AttrBool("causal"),
					Window: ir.Window(n), Scale: ir.AttentionScale(n), QHeads: q[2], KVHeads: k[2]}
				if len(n.Args) == 4 {
					rec.Mask = "additive"
					if !n.Args[3].Type.DType.IsFloat() {
						rec.Mask = "bool"
					}
				}
			}
			res.Found = append(res.Found, rec)
		case ir.OpSoftmax:
			chain := scoreChain(n.Args[0])
			if chain == nil {
				continue
			}
			u := UnmatchedAttention{Softmax: n.Name, Reason: m.reasons[n]}
			if u.Reason == "" {
				u.Reason = "the softmax output is not multiplied by v"
			}
			for i := len(chain) - 1; i >= 0; i-- {
				u.Nodes = append(u.Nodes, chain[i].Name)
			}
			u.Nodes = append(u.Nodes, n.Name)
			res.Unmatched = append(res.Unmatched, u)
		}
	}
	return res
}
