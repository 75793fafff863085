package cuda

import (
	"slices"

	"github.com/lcc-dev/lcc/ir"
)

// Views: fusion across shape changes (docs/design.md §10, "RoPE, SwiGLU and
// residual adds are fused across shape changes").
//
// A value with a view has no buffer of its own: its element at coordinates c is
// element off + Σ c_d·st_d of root's buffer. Two kinds of values get one:
//
//   - read views: results of slice, split, transpose and expand (and reshapes of
//     those) that only elementwise kernels, concats and splits read. The kernels
//     index the root in place, so RoPE's halves, the qkv split and the w13 chunk
//     cost no copy, and rotate_half's concat copies straight from q;
//   - placed values: an elementwise result (or a concat, or a reshape of either)
//     whose one use is an operand of a concat. Its kernel writes straight into
//     the concat's buffer, so RoPE's concat and the backward's concats of
//     gradients (the qkv and w13 gradients) cost no copy; the concat copies only
//     the operands nobody placed.
//
// The plan stays a list of launches over whole buffers: a view is index
// arithmetic baked into the kernels that touch it, and a value with a view is a
// buffer no step names, which the arena never allocates.
type view struct {
	root *ir.Value
	off  int64
	st   []int64 // one stride per dim of the value (not of root)
}

// identity is v's own buffer, row-major.
func identity(v *ir.Value) view { return view{root: v, st: stridesOf(v.Type.Shape)} }

// viewOf is where v's elements live: its view, or its own buffer.
func (g *gen) viewOf(v *ir.Value) view {
	if w, ok := g.views[v]; ok {
		return w
	}
	return identity(v)
}

// readViewOps are the ops whose results can be read views.
var readViewOps = map[ir.Op]bool{ir.OpSlice: true, ir.OpSplit: true, ir.OpTranspose: true,
	ir.OpExpand: true, ir.OpReshape: true}

// through is the view of n's result k given the view x of n's argument; ok is
// false when a reshape cannot be expressed with strides.
func through(n *ir.Node, k int, x view) (view, bool) {
	in, out := n.Args[0].Type.Shape, n.Results[k].Type.Shape
	w := view{root: x.root, off: x.off, st: slices.Clone(x.st)}
	switch n.Op {
	case ir.OpSlice:
		axes, starts, steps := n.AttrInts("axes"), n.AttrInts("starts"), n.AttrInts("steps")
		for i, a := range axes {
			ax, err := ir.AxisIndex(a, len(in))
			if err != nil {
				return view{}, false
			}
			w.off += starts[i] * x.st[ax]
			w.st[ax] = steps[i] * x.st[ax]
		}
	case ir.OpSplit:
		ax, err := ir.AxisIndex(n.AttrInt("axis"), len(in))
		if err != nil {
			return view{}, false
		}
		for _, s := range n.AttrInts("sizes")[:k] {
			w.off += s * x.st[ax]
		}
	case ir.OpTranspose:
		for i, p := range n.AttrInts("perm") {
			w.st[i] = x.st[p]
		}
	case ir.OpExpand:
		w.st = make([]int64, len(out))
		for j := range out {
			d := j - (len(out) - len(in))
			if d >= 0 && in[d] == out[j] {
				w.st[j] = x.st[d]
			}
		}
	case ir.OpReshape:
		st, ok := reshapeStrides(in, x.st, out)
		if !ok {
			return view{}, false
		}
		w.st = st
	default:
		return view{}, false
	}
	return w, true
}

// reshapeStrides gives shape's strides over the elements of a strided tensor of
// shape old and strides st, when a reshape keeps them a strided view; ok false
// otherwise. It is PyTorch's view rule (computeStride in aten's TensorUtils):
// old's dims are grouped into runs contiguous with each other, and each run must
// be a product of consecutive new dims.
func reshapeStrides(old, st, shape []int64) ([]int64, bool) {
	out := make([]int64, len(shape))
	if prod(old) == 0 || len(old) == 0 {
		return stridesOf(shape), prod(old) == prod(shape)
	}
	vd := len(shape) - 1
	chunk := st[len(st)-1]
	var tn, vn int64 = 1, 1
	for d := len(old) - 1; d >= 0; d-- {
		tn *= old[d]
		if d == 0 || (old[d-1] != 1 && st[d-1] != tn*chunk) {
			for vd >= 0 && (vn < tn || shape[vd] == 1) {
				out[vd] = vn * chunk
				vn *= shape[vd]
				vd--
			}
			if vn != tn {
				return nil, false
			}
			if d > 0 {
				chunk, tn, vn = st[d-1], 1, 1
			}
		}
	}
	return out, vd == -1
}

// planViews decides which values get views (see view). It runs after buffers
// and before lowering, so every family knows what to skip.
func (g *gen) planViews() {
	g.views, g.placed = map[*ir.Value]view{}, map[*ir.Value]bool{}
	body := g.f.Body
	// Read views: start from every candidate, then drop, until nothing changes,
	// a value some use cannot read in place (a kernel that is not elementwise, or
	// a view op whose results are not all views), or one whose view does not
	// exist (a reshape of a strided view). Dropping only shrinks the set, and a
	// dropped value is materialised by its own op's kernel.
	cand := map[*ir.Value]bool{}
	for _, n := range body {
		if !readViewOps[n.Op] {
			continue
		}
		// A reshape of a buffer is an alias already; only chains through the
		// other view ops need views.
		if n.Op == ir.OpReshape && !cand[n.Args[0]] {
			continue
		}
		for _, r := range n.Results {
			cand[r] = !g.outputs[r]
		}
	}
	g.planFlash()
	for changed := true; changed; {
		changed = false
		g.views = map[*ir.Value]view{}
		for _, n := range body {
			if !readViewOps[n.Op] {
				continue
			}
			for k, r := range n.Results {
				if !cand[r] {
					continue
				}
				if n.Op == ir.OpReshape && !cand[n.Args[0]] {
					cand[r], changed = false, true
					continue
				}
				w, ok := through(n, k, g.viewOf(n.Args[0]))
				if !ok {
					cand[r], changed = false, true
					continue
				}
				g.views[r] = w
			}
		}
		cover := g.flashCover(cand)
		for v, ok := range cand {
			if ok && !g.readInPlace(v, cand, cover) {
				cand[v], changed = false, true
			}
		}
	}
	// Placed values, outermost concat first, so a nested concat knows its region.
	for i := len(body) - 1; i >= 0; i-- {
		n := body[i]
		if n.Op != ir.OpConcat {
			continue
		}
		dst := g.viewOf(n.Result())
		ax, err := ir.AxisIndex(n.AttrInt("axis"), n.Result().Type.Rank())
		if err != nil {
			continue
		}
		at := int64(0)
		for _, a := range n.Args {
			region := view{root: dst.root, off: dst.off + at*dst.st[ax], st: dst.st}
			g.place(a, n, region)
			at += a.Type.Shape[ax]
		}
	}
}

// readInPlace reports whether every use of v reads it through its view: an
// elementwise kernel, a concat or split (their copies read views), a view op
// whose results are all (still) candidates, or a flash kernel whose reads
// cover the view's buffer (attention_views.go).
func (g *gen) readInPlace(v *ir.Value, cand map[*ir.Value]bool, cover map[*ir.Value]int64) bool {
	for _, u := range g.uses[v] {
		switch {
		case readsElementwise(u), u.Op == ir.OpConcat, u.Op == ir.OpSplit:
		case g.readsFlash(u, v):
			root := g.viewOf(v).root
			if cover[root] < prod(root.Type.Shape) {
				return false
			}
		case readViewOps[u.Op]:
			for _, r := range u.Results {
				if !cand[r] {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// place gives a, an operand of concat c, the region of c's buffer it fills,
// when a's producer can write there: an elementwise kernel, a concat, the
// flash backward (its dq, dk and dv), or a reshape of one of those, with c the
// one use of a (and of every value on the way).
func (g *gen) place(a *ir.Value, c *ir.Node, region view) {
	if a.Def == nil || g.outputs[a] || len(g.uses[a]) != 1 || g.uses[a][0] != c {
		return
	}
	if _, ok := g.views[a]; ok {
		return
	}
	switch n := a.Def; {
	case readsElementwise(n), n.Op == ir.OpConcat:
		g.views[a], g.placed[a] = region, true
	case g.flashNodes[n] && n.Op == ir.OpAttentionGrad:
		// dq, dk or dv, written by the flash backward where the region is
		// (attention_views.go).
		if _, ok := flashLayout(a, region); ok {
			g.views[a], g.placed[a] = region, true
		}
	case n.Op == ir.OpReshape:
		x := n.Args[0]
		st, ok := reshapeStrides(a.Type.Shape, region.st, x.Type.Shape)
		if !ok {
			return
		}
		g.place(x, n, view{root: region.root, off: region.off, st: st})
		if g.placed[x] {
			g.views[a], g.placed[a] = region, true
		}
	}
}

// isView reports whether every result of n is a read view, so n moves no data.
func (g *gen) isView(n *ir.Node) bool {
	if !readViewOps[n.Op] {
		return false
	}
	for _, r := range n.Results {
		if _, ok := g.views[r]; !ok {
			return false
		}
	}
	return true
}
