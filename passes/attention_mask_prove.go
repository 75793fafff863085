package passes

import (
	"math"
	"slices"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// This file proves what a mask hides from the structure of its subgraph, so that
// a mask built from positions (HF's Range, comparisons, And of padding masks,
// Where of −inf; GPT-2's sliced causal buffer; Trilu of ones) is classified at
// any sequence length, including lengths whose [T, S] mask could never be
// evaluated. It is an abstract interpretation over two exact symbolic forms:
//
//   - affine: element (i₀, …, i_{r−1}) is c + Σ aₖ·iₖ, with integers c and aₖ
//     exactly representable in the value's dtype over its whole index box (Range,
//     broadcasts, slices, sums, integer casts; a constant is the case aₖ = 0);
//   - band: element depends only on δ = col − row of the last two axes, and is
//     piecewise constant in δ (comparisons of two positions, Trilu, and anything
//     elementwise built from bands and constants).
//
// Every rule below is exact or gives up (nil); nothing is sampled, so a proof
// holds for the bound shape whatever its size. A mask is causal when its visible
// set is the band δ ≤ 0, and a sliding window of W keys when it is −W < δ ≤ 0.
// Evaluation on the CPU interpreter remains the cross-check wherever the mask is
// small enough to evaluate (attention_match.go compares both and treats a
// disagreement as a bug).

// affine is c + Σ coef[k]·i_k over a value's index box; coef[k] is 0 on unit axes.
type affine struct {
	c    float64
	coef []float64
}

// band is a function of δ = col − row: piece i holds vals[i] for
// cuts[i−1] < δ ≤ cuts[i] (cuts ascending; the first piece is unbounded below,
// the last unbounded above).
type band struct {
	cuts []int64
	vals []float64
}

// sym is the symbolic form of one value: exactly one of aff and band is set.
type sym struct {
	dtype tensor.DType
	shape []int64
	aff   *affine
	band  *band
}

func constSym(dt tensor.DType, shape []int64, x float64) *sym {
	return &sym{dtype: dt, shape: shape, aff: &affine{c: x, coef: make([]float64, len(shape))}}
}

// constant returns the value of every element when s is uniform.
func (s *sym) constant() (float64, bool) {
	if s.aff == nil {
		return 0, false
	}
	for _, a := range s.aff.coef {
		if a != 0 {
			return 0, false
		}
	}
	return s.aff.c, true
}

// maskProver computes symbolic forms, caching them for masks that several layers
// share (nil in the cache: no form).
type maskProver struct {
	cache map[*ir.Value]*sym
	done  map[*ir.Value]bool
}

func newMaskProver() *maskProver {
	return &maskProver{cache: map[*ir.Value]*sym{}, done: map[*ir.Value]bool{}}
}

// maxExact is the largest integer magnitude below which every integer is exact
// in dt (2^mantissa bits + 1 for floats).
func maxExact(dt tensor.DType) float64 {
	switch dt {
	case tensor.F64:
		return 1 << 53
	case tensor.F32:
		return 1 << 24
	case tensor.F16:
		return 1 << 11
	case tensor.BF16:
		return 1 << 8
	case tensor.I64:
		return 1 << 62
	case tensor.I32:
		return 1 << 31
	case tensor.I8:
		return 1 << 7
	case tensor.U8:
		return 1 << 8
	case tensor.Bool:
		return 1
	}
	return 0
}

// bounds returns the least and greatest value of a over the index box of shape.
func (a *affine) bounds(shape []int64) (lo, hi float64) {
	lo, hi = a.c, a.c
	for k, x := range a.coef {
		span := x * float64(shape[k]-1)
		if span < 0 {
			lo += span
		} else {
			hi += span
		}
	}
	return lo, hi
}

// exact checks that a non-constant affine form has integer terms and that every
// value it takes is an integer the dtype holds exactly, so that comparisons of
// such values are comparisons of integers. Constants are always accepted.
func exact(s *sym) *sym {
	if s == nil || s.aff == nil {
		return s
	}
	for k := range s.aff.coef {
		if s.shape[k] == 1 {
			s.aff.coef[k] = 0
		}
	}
	if _, ok := s.constant(); ok {
		return s
	}
	terms := append([]float64{s.aff.c}, s.aff.coef...)
	for _, x := range terms {
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return nil
		}
	}
	lo, hi := s.aff.bounds(s.shape)
	if m := maxExact(s.dtype); -lo > m || hi > m {
		return nil
	}
	return s
}

// normBand merges equal neighbouring pieces of a band and drops those outside
// the δ range the shape allows; it returns a constant when one piece is left and
// nil when a last axis is a unit axis with more than one piece left (the value
// would then depend on one index alone).
func normBand(s *sym) *sym {
	r := len(s.shape)
	rows, cols := s.shape[r-2], s.shape[r-1]
	lo, hi := -(rows - 1), cols-1
	if lo > hi {
		return nil
	}
	in := s.band
	var cuts []int64 // the upper cut of each kept piece (the last one is dropped)
	var vals []float64
	for i, v := range in.vals {
		plo, phi := lo, hi
		if i > 0 {
			plo = max(lo, in.cuts[i-1]+1)
		}
		if i < len(in.cuts) {
			phi = min(hi, in.cuts[i])
		}
		if plo > phi {
			continue
		}
		n := len(vals)
		if n > 0 && (vals[n-1] == v || math.IsNaN(vals[n-1]) && math.IsNaN(v)) {
			cuts[n-1] = phi
			continue
		}
		vals = append(vals, v)
		cuts = append(cuts, phi)
	}
	cuts = cuts[:len(vals)-1]
	if len(vals) == 1 {
		return constSym(s.dtype, s.shape, vals[0])
	}
	if rows == 1 || cols == 1 {
		return nil
	}
	return &sym{dtype: s.dtype, shape: s.shape, band: &band{cuts: cuts, vals: vals}}
}

// at returns the band's value at δ.
func (b *band) at(d int64) float64 {
	i, _ := slices.BinarySearch(b.cuts, d)
	return b.vals[i]
}

// fromTensor gives a constant tensor its symbolic form: uniform, affine, or a
// band; nil when it is none of these.
func fromTensor(t *tensor.Tensor, shape []int64) *sym {
	n := t.Numel()
	if n == 0 {
		return nil
	}
	x0 := t.Float(0)
	uniform := true
	for i := 1; i < n && uniform; i++ {
		uniform = t.Float(i) == x0
	}
	if uniform {
		return constSym(t.DType, shape, x0)
	}
	if s := affineOf(t, shape); s != nil {
		return s
	}
	return bandOf(t, shape)
}

// affineOf fits c + Σ a_k·i_k to t from its first element and first steps, then
// checks every element.
func affineOf(t *tensor.Tensor, shape []int64) *sym {
	r := len(shape)
	strides := make([]int64, r)
	st := int64(1)
	for k := r - 1; k >= 0; k-- {
		strides[k] = st
		st *= shape[k]
	}
	s := &sym{dtype: t.DType, shape: shape, aff: &affine{c: t.Float(0), coef: make([]float64, r)}}
	for k := range shape {
		if shape[k] > 1 {
			s.aff.coef[k] = t.Float(int(strides[k])) - s.aff.c
		}
	}
	idx := make([]int64, r)
	for i := 0; i < t.Numel(); i++ {
		want := s.aff.c
		for k := range idx {
			want += s.aff.coef[k] * float64(idx[k])
		}
		if t.Float(i) != want {
			return nil
		}
		for k := r - 1; k >= 0; k-- {
			if idx[k]++; idx[k] < shape[k] {
				break
			}
			idx[k] = 0
		}
	}
	return exact(s)
}

// bandOf reads t as a function of col − row of its last two axes, the same for
// every leading index, or returns nil.
func bandOf(t *tensor.Tensor, shape []int64) *sym {
	r := len(shape)
	if r < 2 {
		return nil
	}
	rows, cols := shape[r-2], shape[r-1]
	g := func(d int64) float64 { // value on diagonal d of the first matrix
		row := max(0, -d)
		return t.Float(int(row*cols + row + d))
	}
	var b band
	for d := -(rows - 1); d < cols; d++ {
		v := g(d)
		if n := len(b.vals); n == 0 || b.vals[n-1] != v {
			if n > 0 {
				b.cuts = append(b.cuts, d-1)
			}
			b.vals = append(b.vals, v)
		}
	}
	mat := rows * cols
	for i := 0; i < t.Numel(); i++ {
		j := int64(i) % mat
		if t.Float(i) != b.at(j%cols-j/cols) {
			return nil
		}
	}
	return normBand(&sym{dtype: t.DType, shape: shape, band: &b})
}

// broadcast gives s the form it has broadcast to shape (numpy rules).
func broadcast(s *sym, shape []int64) *sym {
	if s == nil {
		return nil
	}
	off := len(shape) - len(s.shape)
	if off < 0 {
		return nil
	}
	out := &sym{dtype: s.dtype, shape: shape}
	switch {
	case s.aff != nil:
		out.aff = &affine{c: s.aff.c, coef: make([]float64, len(shape))}
		for k, d := range s.shape {
			if d > 1 && d == shape[off+k] {
				out.aff.coef[off+k] = s.aff.coef[k]
			}
		}
	default:
		r := len(shape)
		if len(s.shape) < 2 || s.shape[len(s.shape)-2] != shape[r-2] ||
			s.shape[len(s.shape)-1] != shape[r-1] {
			return nil
		}
		out.band = s.band
	}
	return out
}

// of returns v's symbolic form, or nil.
func (p *maskProver) of(v *ir.Value) *sym {
	if p.done[v] {
		return p.cache[v]
	}
	p.done[v] = true
	s := p.compute(v)
	p.cache[v] = s
	return s
}

// compute applies the rule of v's defining op.
func (p *maskProver) compute(v *ir.Value) *sym {
	shape := v.Type.Shape
	if v.Param != nil {
		// A weight with data is a constant of the compiled program, as in maskEval.
		if v.Param.Data == nil {
			return nil
		}
		return fromTensor(v.Param.Data, shape)
	}
	n := v.Def
	at := n.Attrs
	switch {
	case n.Op == ir.OpConstant:
		return fromTensor(at.Tensor("value"), shape)
	case n.Op == ir.OpFull:
		return constSym(v.Type.DType, shape, at.Float("value", 0))
	case n.Op == ir.OpRange:
		s := constSym(v.Type.DType, shape, at.Float("start", 0))
		s.aff.coef[0] = at.Float("delta", 1)
		return exact(s)
	case n.Op == ir.OpExpand:
		return broadcast(p.of(n.Args[0]), shape)
	case n.Op == ir.OpReshape:
		return reshapeSym(p.of(n.Args[0]), shape)
	case n.Op == ir.OpTranspose:
		return transposeSym(p.of(n.Args[0]), at.Ints("perm"))
	case n.Op == ir.OpSlice:
		return sliceSym(p.of(n.Args[0]), n)
	case n.Op == ir.OpConcat:
		return p.concat(n)
	case n.Op == ir.OpTrilu:
		return triluSym(n, p.of(n.Args[0]))
	case n.Op == ir.OpCumSum:
		return cumsumSym(n, p.of(n.Args[0]))
	case n.Op == ir.OpGather || n.Op == ir.OpGatherND:
		// Gathering from a uniform tensor gives that value wherever the indices point.
		if c, ok := p.of(n.Args[0]).constantOrNo(); ok {
			return constSym(v.Type.DType, shape, c)
		}
		return nil
	case n.Op.Info().Elementwise && len(n.Results) == 1:
		return p.elementwise(n)
	}
	return nil
}

func (s *sym) constantOrNo() (float64, bool) {
	if s == nil {
		return 0, false
	}
	return s.constant()
}

// reshapeSym keeps a form through a reshape that only inserts or drops unit dims
// (any reshape of a constant).
func reshapeSym(s *sym, shape []int64) *sym {
	if s == nil {
		return nil
	}
	if c, ok := s.constant(); ok {
		return constSym(s.dtype, shape, c)
	}
	if !unitReshape(s.shape, shape) {
		return nil
	}
	if s.band != nil {
		r, q := len(shape), len(s.shape)
		if r < 2 || shape[r-2] != s.shape[q-2] || shape[r-1] != s.shape[q-1] {
			return nil
		}
		return &sym{dtype: s.dtype, shape: shape, band: s.band}
	}
	var coefs []float64 // of the non-unit axes, in order
	for k, d := range s.shape {
		if d != 1 {
			coefs = append(coefs, s.aff.coef[k])
		}
	}
	out := constSym(s.dtype, shape, s.aff.c)
	j := 0
	for k, d := range shape {
		if d != 1 {
			out.aff.coef[k] = coefs[j]
			j++
		}
	}
	return out
}

// transposeSym permutes an affine form's axes; a band survives when the last two
// axes stay (or swap, which mirrors δ).
func transposeSym(s *sym, perm []int64) *sym {
	if s == nil {
		return nil
	}
	shape := make([]int64, len(perm))
	for i, p := range perm {
		shape[i] = s.shape[p]
	}
	if s.aff != nil {
		out := constSym(s.dtype, shape, s.aff.c)
		for i, p := range perm {
			out.aff.coef[i] = s.aff.coef[p]
		}
		return out
	}
	r := int64(len(perm))
	switch {
	case perm[r-2] == r-2 && perm[r-1] == r-1:
		return &sym{dtype: s.dtype, shape: shape, band: s.band}
	case perm[r-2] == r-1 && perm[r-1] == r-2:
		// f'(δ) = f(−δ): the piece (a, b] becomes [−b, −a) = (−b−1, −a−1].
		nb := &band{}
		for i := len(s.band.vals) - 1; i >= 0; i-- {
			nb.vals = append(nb.vals, s.band.vals[i])
		}
		for i := len(s.band.cuts) - 1; i >= 0; i-- {
			nb.cuts = append(nb.cuts, -s.band.cuts[i]-1)
		}
		return normBand(&sym{dtype: s.dtype, shape: shape, band: nb})
	}
	return nil
}

// sliceSym: index i of a sliced axis reads start + step·i of the source; a band
// shifts by the column start minus the row start (steps of 1 only).
func sliceSym(s *sym, n *ir.Node) *sym {
	if s == nil {
		return nil
	}
	shape := n.Result().Type.Shape
	axes, starts, steps := n.AttrInts("axes"), n.AttrInts("starts"), n.AttrInts("steps")
	r := len(shape)
	if s.aff != nil {
		out := constSym(s.dtype, shape, s.aff.c)
		copy(out.aff.coef, s.aff.coef)
		for i, a := range axes {
			ax, err := ir.AxisIndex(a, r)
			if err != nil {
				return nil
			}
			out.aff.c += out.aff.coef[ax] * float64(starts[i])
			out.aff.coef[ax] *= float64(steps[i])
		}
		return exact(out)
	}
	shift := int64(0) // δ_source = δ_slice + shift
	for i, a := range axes {
		ax, err := ir.AxisIndex(a, r)
		if err != nil {
			return nil
		}
		switch ax {
		case r - 2:
			if steps[i] != 1 {
				return nil
			}
			shift -= starts[i]
		case r - 1:
			if steps[i] != 1 {
				return nil
			}
			shift += starts[i]
		}
	}
	nb := &band{vals: s.band.vals}
	for _, c := range s.band.cuts {
		nb.cuts = append(nb.cuts, c-shift)
	}
	return normBand(&sym{dtype: s.dtype, shape: shape, band: nb})
}

// concat joins equal constants, bands along a leading axis, and affine pieces
// that continue one another ([p₀ − 1] ++ p, HF's position differences).
func (p *maskProver) concat(n *ir.Node) *sym {
	shape := n.Result().Type.Shape
	r := len(shape)
	ax, err := ir.AxisIndex(n.AttrInt("axis"), r)
	if err != nil {
		return nil
	}
	var parts []*sym
	for _, a := range n.Args {
		s := p.of(a)
		if s == nil {
			return nil
		}
		parts = append(parts, broadcast(s, s.shape)) // a copy with unit axes zeroed
	}
	if parts[0].band != nil {
		for _, s := range parts {
			if s.band == nil || ax >= r-2 || !slices.Equal(s.band.cuts, parts[0].band.cuts) ||
				!slices.Equal(s.band.vals, parts[0].band.vals) {
				return nil
			}
		}
		return &sym{dtype: parts[0].dtype, shape: shape, band: parts[0].band}
	}
	// The joined form takes its step along ax from a part longer than 1 there, or
	// from the first two parts' values.
	out := constSym(parts[0].dtype, shape, parts[0].aff.c)
	copy(out.aff.coef, parts[0].aff.coef)
	step, known := 0.0, false
	for _, s := range parts {
		if s.aff == nil {
			return nil
		}
		if s.shape[ax] > 1 {
			step, known = s.aff.coef[ax], true
			break
		}
	}
	if !known && len(parts) > 1 {
		step = parts[1].aff.c - parts[0].aff.c
	}
	out.aff.coef[ax] = step
	off := int64(0)
	for _, s := range parts {
		for k := range shape {
			if k != ax && s.aff.coef[k] != out.aff.coef[k] {
				return nil
			}
		}
		if s.shape[ax] > 1 && s.aff.coef[ax] != step {
			return nil
		}
		if s.aff.c != out.aff.c+step*float64(off) {
			return nil
		}
		off += s.shape[ax]
	}
	return exact(out)
}

// triluSym keeps the elements with δ ≤ k (lower) or δ ≥ k (upper) of a constant
// or a band and zeroes the rest.
func triluSym(n *ir.Node, s *sym) *sym {
	if s == nil || s.aff != nil {
		if _, ok := s.constantOrNo(); !ok {
			return nil
		}
	}
	k := n.AttrInt("k")
	keep := &band{cuts: []int64{k}, vals: []float64{1, 0}}
	if n.AttrBool("upper") {
		keep = &band{cuts: []int64{k - 1}, vals: []float64{0, 1}}
	}
	shape := s.shape
	if len(shape) < 2 {
		return nil
	}
	ks := normBand(&sym{dtype: tensor.Bool, shape: shape, band: keep})
	if ks == nil {
		return nil
	}
	zero := constSym(s.dtype, shape, 0)
	return combine(ir.OpWhere, nil, s.dtype, shape, []*sym{ks, s, zero})
}

// cumsumSym: the running sum of a uniform c along an axis is affine in the index.
func cumsumSym(n *ir.Node, s *sym) *sym {
	c, ok := s.constantOrNo()
	if !ok {
		return nil
	}
	r := len(s.shape)
	ax, err := ir.AxisIndex(n.AttrInt("axis"), r)
	if err != nil {
		return nil
	}
	size := float64(s.shape[ax])
	out := constSym(s.dtype, s.shape, 0)
	excl, rev := n.AttrBool("exclusive"), n.AttrBool("reverse")
	switch {
	case !rev && !excl: // c·(i+1)
		out.aff.c, out.aff.coef[ax] = c, c
	case !rev && excl: // c·i
		out.aff.coef[ax] = c
	case rev && !excl: // c·(n−i)
		out.aff.c, out.aff.coef[ax] = c*size, -c
	default: // c·(n−1−i)
		out.aff.c, out.aff.coef[ax] = c*(size-1), -c
	}
	return exact(out)
}

// elementwise applies an elementwise op to the forms of its arguments.
func (p *maskProver) elementwise(n *ir.Node) *sym {
	res := n.Result().Type
	var args []*sym
	bands, affs := 0, 0
	for _, a := range n.Args {
		s := broadcast(p.of(a), res.Shape)
		if s == nil {
			return nil
		}
		switch _, c := s.constant(); {
		case s.band != nil:
			bands++
		case !c:
			affs++
		}
		args = append(args, s)
	}
	switch {
	case affs == 0:
		return combine(n.Op, n.Attrs, res.DType, res.Shape, args)
	case bands > 0:
		return nil
	}
	return affineOp(n, res, args)
}

// affineOp applies the ops that keep (or compare) affine forms.
func affineOp(n *ir.Node, res ir.Type, args []*sym) *sym {
	lin := func(x, y *sym, ky float64) *sym { // x + ky·y
		out := constSym(res.DType, res.Shape, x.aff.c+ky*y.aff.c)
		for k := range out.aff.coef {
			out.aff.coef[k] = x.aff.coef[k] + ky*y.aff.coef[k]
		}
		return out
	}
	zero := constSym(res.DType, res.Shape, 0)
	switch n.Op {
	case ir.OpAdd:
		return exact(lin(args[0], args[1], 1))
	case ir.OpSub:
		return exact(lin(args[0], args[1], -1))
	case ir.OpNeg:
		return exact(lin(zero, args[0], -1))
	case ir.OpMul:
		for i := range 2 {
			if c, ok := args[1-i].constant(); ok {
				return exact(lin(zero, args[i], c))
			}
		}
	case ir.OpCast:
		if res.DType == tensor.Bool {
			return nil
		}
		// Integral values cast to a type that holds them exactly are unchanged.
		if exact(&sym{dtype: args[0].dtype, shape: res.Shape, aff: args[0].aff}) == nil {
			return nil
		}
		return exact(&sym{dtype: res.DType, shape: res.Shape, aff: args[0].aff})
	case ir.OpWhere:
		if c, ok := args[0].constant(); ok {
			if c != 0 {
				return args[1]
			}
			return args[2]
		}
	case ir.OpEq, ir.OpLt, ir.OpLe, ir.OpGt, ir.OpGe:
		return compare(n.Op, res.Shape, args[0], args[1])
	}
	return nil
}

// compare turns x op y of two exact affine forms into a constant or a band.
func compare(op ir.Op, shape []int64, x, y *sym) *sym {
	if exact(x) == nil || exact(y) == nil {
		return nil
	}
	for _, c := range []float64{x.aff.c, y.aff.c} {
		if c != math.Trunc(c) || math.Abs(c) > 1<<53 {
			return nil
		}
	}
	d := &affine{c: x.aff.c - y.aff.c, coef: make([]float64, len(shape))}
	for k := range d.coef {
		d.coef[k] = x.aff.coef[k] - y.aff.coef[k]
	}
	// holds reports op over an integer interval of d's values: 1, 0, or −1 (both).
	holds := func(lo, hi float64) int {
		in := func(v float64) bool {
			switch op {
			case ir.OpEq:
				return v == 0
			case ir.OpLt:
				return v < 0
			case ir.OpLe:
				return v <= 0
			case ir.OpGt:
				return v > 0
			}
			return v >= 0
		}
		a, b := in(lo), in(hi)
		switch {
		case op == ir.OpEq && lo < 0 && hi > 0:
			return -1
		case a && b:
			return 1
		case !a && !b:
			return 0
		}
		return -1
	}
	lo, hi := d.bounds(shape)
	switch holds(lo, hi) {
	case 1:
		return constSym(tensor.Bool, shape, 1)
	case 0:
		return constSym(tensor.Bool, shape, 0)
	}
	// d = α·col + β·row + c with α = −β: a function of δ = col − row.
	r := len(shape)
	for k := 0; k < r-2; k++ {
		if d.coef[k] != 0 {
			return nil
		}
	}
	if r < 2 || d.coef[r-1] == 0 || d.coef[r-1] != -d.coef[r-2] {
		return nil
	}
	alpha := d.coef[r-1]
	// Pieces of δ: collect every δ where α·δ + c crosses 0, then evaluate op on
	// each piece (α·δ + c is monotone in δ, so op is constant between cuts).
	root := -d.c / alpha
	cands := []int64{int64(math.Floor(root)) - 1, int64(math.Floor(root)), int64(math.Ceil(root))}
	slices.Sort(cands)
	cands = slices.Compact(cands)
	b := &band{}
	val := func(dl int64) float64 {
		if holds(alpha*float64(dl)+d.c, alpha*float64(dl)+d.c) == 1 {
			return 1
		}
		return 0
	}
	for _, c := range cands {
		b.cuts = append(b.cuts, c)
		b.vals = append(b.vals, val(c))
	}
	b.vals = append(b.vals, val(cands[len(cands)-1]+1))
	return normBand(&sym{dtype: tensor.Bool, shape: shape, band: b})
}

// combine applies op to constants and bands: the result is a band whose pieces
// are the union of the arguments' cuts, each evaluated once on the interpreter.
func combine(op ir.Op, attrs ir.Attrs, dt tensor.DType, shape []int64, args []*sym) *sym {
	var cuts []int64
	for _, s := range args {
		if s.band != nil {
			cuts = append(cuts, s.band.cuts...)
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	// One sample δ per piece: each cut closes its piece; past the last, cut+1.
	samples := append([]int64{}, cuts...)
	if len(cuts) > 0 {
		samples = append(samples, cuts[len(cuts)-1]+1)
	} else {
		samples = []int64{0}
	}
	pn := int64(len(samples))
	b := ir.NewBuilder("mask-prove")
	var ins []*ir.Value
	var ts []*tensor.Tensor
	for _, s := range args {
		vals := make([]float64, pn)
		for i, d := range samples {
			if s.band != nil {
				vals[i] = s.band.at(d)
			} else {
				vals[i] = s.aff.c
			}
		}
		var t *tensor.Tensor
		if s.dtype.IsFloat() {
			t = tensor.FromFloats(s.dtype, []int64{pn}, vals)
		} else {
			iv := make([]int64, pn)
			for i, x := range vals {
				iv[i] = int64(x)
			}
			t = tensor.FromInts(s.dtype, []int64{pn}, iv)
		}
		ins = append(ins, b.Input("", ir.T(s.dtype, pn)))
		ts = append(ts, t)
	}
	outs := b.Apply(op, attrs, ins...)
	if b.Err() != nil || len(outs) != 1 || outs[0].Def == nil {
		return nil
	}
	res, err := interp.EvalNode(outs[0].Def, ts, interp.Options{Precision: tensor.F64})
	if err != nil || res[0].DType != dt {
		return nil
	}
	vals := make([]float64, pn)
	for i := range vals {
		vals[i] = res[0].Float(i)
	}
	if len(cuts) == 0 {
		return constSym(dt, shape, vals[0])
	}
	return normBand(&sym{dtype: dt, shape: shape, band: &band{cuts: cuts, vals: vals}})
}

// proveMask classifies mask m of scores [.., t, s] from its symbolic form;
// ok is false when m has no form (the mask is then classified by evaluation or
// left explicit). visible maps an element's value to whether it shows its key.
func (p *maskProver) proveMask(m *ir.Value, visible func(x float64) (vis, pure bool),
	t, s int64) (class maskClass, ok bool) {
	f := p.of(m)
	if f == nil {
		return classExplicit, false
	}
	if c, isConst := f.constant(); isConst {
		vis, pure := visible(c)
		if pure && vis {
			return classNone, true
		}
		return classExplicit, true
	}
	if f.band == nil {
		return classExplicit, false
	}
	r := len(f.shape)
	if t != s || f.shape[r-2] != t || f.shape[r-1] != s {
		return classExplicit, false
	}
	// The visible δ within the matrix must be one run [start, 0]: start = −(t−1)
	// is causal, a later start a window of 1 − start keys. Pieces come in δ order,
	// and a visible piece that does not begin where the run ended starts a new run.
	var start, end int64
	runs := 0
	for i, v := range f.band.vals {
		lo, hi := -(t - 1), t-1 // the piece's δ range within the matrix
		if i > 0 {
			lo = max(lo, f.band.cuts[i-1]+1)
		}
		if i < len(f.band.cuts) {
			hi = min(hi, f.band.cuts[i])
		}
		if lo > hi {
			continue
		}
		vis, pure := visible(v)
		switch {
		case !pure:
			return classExplicit, true
		case !vis:
			continue
		case runs == 0 || lo != end+1:
			runs++
			start = lo
		}
		end = hi
	}
	if runs != 1 || end != 0 {
		return classExplicit, true
	}
	return windowClass(1-start, t), true
}
