package cuda

import (
	"fmt"

	"github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/ir"
)

// Flash views: the tensor-core attention kernels read q, k and v in place and
// write dq, dk and dv in place (view.go's read views and placed values).
//
// A fused qkv projection's GEMM writes [B, T, 3, H, D] (or [B, T, (Hq+2·Hkv)·D]),
// and q, k and v are views of it whose rows lie 3·H·D elements apart. The flash
// kernels take a row and a batch stride per tensor (flash.Desc.Views), so they
// read q, k and v where the GEMM wrote them, and write dq, dk and dv into the
// qkv gradient the backward's concat assembles: neither the split's copies nor
// the concat's run.
//
// Reading in place keeps the whole projection alive until the backward, where
// copies would keep only what was copied. So a buffer is read in place by the
// flash kernels only when the views they read cover all of it, and the step
// never holds more than the copies would: GPT-2's c_attn, whose q, k and v all
// go to attention as they are. The flagship's q and k are RoPE's results, so its
// v stays a copy; its dv is written in place all the same.

// planFlash marks the attention nodes whose q, k and v may be views and whose
// dq, dk and dv may be placed: dense attention and its gradient on the flash
// kernels (not a dilated node, whose branches have their own strides).
func (g *gen) planFlash() {
	g.flashNodes = map[*ir.Node]bool{}
	if g.opts.ScalarAttention {
		return
	}
	for _, n := range g.f.Body {
		if n.Op != ir.OpAttention && n.Op != ir.OpAttentionGrad {
			continue
		}
		if d, err := g.flashDesc(n); err == nil && d.Fused() {
			g.flashNodes[n] = true
		}
	}
}

// flashLayout is w, the view of v [B, rows, heads, D], as the flash kernels
// index it; ok is false when a head's D elements or a row's heads are not
// contiguous, or a row does not start on 16 bytes.
func flashLayout(v *ir.Value, w view) (flash.Layout, bool) {
	s := v.Type.Shape
	if len(s) != 4 || len(w.st) != 4 {
		return flash.Layout{}, false
	}
	if w.st[3] != 1 && s[3] > 1 || w.st[2] != s[3] && s[2] > 1 {
		return flash.Layout{}, false
	}
	l := flash.Layout{Off: w.off, Row: w.st[1], Batch: w.st[0]}
	if s[1] == 1 {
		l.Row = s[2] * s[3]
	}
	if s[0] == 1 {
		l.Batch = s[1] * l.Row
	}
	if l.Check(s[0], s[1], int(s[2]), int(s[3])) != nil {
		return flash.Layout{}, false
	}
	return l, true
}

// readsFlash reports whether u reads v only as a flash kernel's q, k or v,
// through a view the kernels can index.
func (g *gen) readsFlash(u *ir.Node, v *ir.Value) bool {
	if !g.flashNodes[u] {
		return false
	}
	for i, a := range u.Args {
		if a == v && i > 2 {
			return false // o, lse, dO: the kernels' own buffers
		}
	}
	_, ok := flashLayout(v, g.viewOf(v))
	return ok
}

// flashCover is, for each buffer with read views, the elements of its views
// that flash kernels read: the buffer may be read in place by them when these
// cover it (the candidates cand of planViews' current round).
func (g *gen) flashCover(cand map[*ir.Value]bool) map[*ir.Value]int64 {
	cover := map[*ir.Value]int64{}
	for _, n := range g.f.Body {
		if !readViewOps[n.Op] {
			continue
		}
		for _, r := range n.Results {
			w, ok := g.views[r]
			if !ok || !cand[r] {
				continue
			}
			for _, u := range g.uses[r] {
				if g.readsFlash(u, r) {
					cover[w.root] += prod(r.Type.Shape)
					break
				}
			}
		}
	}
	return cover
}

// flashViews are the layouts of n's q, k and v (and of dq, dk and dv for the
// gradient) where they are views; a tensor in its own buffer keeps the zero
// Layout, so such kernels are the same bytes as without views.
func (g *gen) flashViews(n *ir.Node) (flash.Views, error) {
	var bad *ir.Value
	at := func(v *ir.Value) flash.Layout {
		w, ok := g.views[v]
		if !ok {
			return flash.Layout{}
		}
		l, ok := flashLayout(v, w)
		if !ok {
			bad = v
		}
		return l
	}
	vs := flash.Views{Q: at(n.Args[0]), K: at(n.Args[1]), V: at(n.Args[2])}
	if n.Op == ir.OpAttentionGrad {
		vs.DQ, vs.DK, vs.DV = at(n.Results[0]), at(n.Results[1]), at(n.Results[2])
	}
	if bad != nil {
		return flash.Views{}, fmt.Errorf("lcc: BUG: attention %q: %v is a view the flash kernels cannot index", n.Name, bad.Type)
	}
	return vs, nil
}

// bufOf is the buffer a kernel is given for v: its view's root, or its own.
func (g *gen) bufOf(v *ir.Value) int { return g.ids[g.viewOf(v).root] }
