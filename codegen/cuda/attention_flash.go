package cuda

import (
	"math"

	"github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// flashDesc returns the tensor-core kernel descriptor of attention node n and
// true when the tensor-core tier takes it: dense attention (no explicit mask),
// causal or not, with q, k, v and o stored in bf16 and head dim 64 or 128.
// Everything else (f32 storage, other head dims, masks, dilated attention) keeps
// the scalar kernels of attention.go; the plan's step op says which one ran
// ("attention.flash.*" or "attention").
func (g *gen) flashDesc(n *ir.Node) (flash.Desc, bool) {
	if n.Op != ir.OpAttention && n.Op != ir.OpAttentionGrad {
		return flash.Desc{}, false
	}
	if (n.Op == ir.OpAttention && len(n.Args) != 3) || (n.Op == ir.OpAttentionGrad && len(n.Args) != 6) {
		return flash.Desc{}, false // an explicit mask
	}
	bf16 := []*ir.Value{n.Args[0], n.Args[1], n.Args[2]}
	if n.Op == ir.OpAttention {
		bf16 = append(bf16, n.Results[0])
	} else {
		bf16 = append(bf16, n.Args[3], n.Args[5], n.Results[0], n.Results[1], n.Results[2])
	}
	for _, v := range bf16 {
		if g.storageOf(v) != tensor.BF16 {
			return flash.Desc{}, false
		}
	}
	if n.Op == ir.OpAttentionGrad && g.storageOf(n.Args[4]) != tensor.F32 {
		return flash.Desc{}, false
	}
	q, k := n.Args[0].Type, n.Args[1].Type
	d := flash.Desc{B: q.Shape[0], T: q.Shape[1], S: k.Shape[1], Hq: int(q.Shape[2]), Hkv: int(k.Shape[2]),
		D: int(q.Shape[3]), Causal: n.Attrs.Bool("causal"),
		Scale: n.Attrs.Float("scale", 1/math.Sqrt(float64(q.Shape[3])))}.Defaults()
	if d.Check() != nil {
		return flash.Desc{}, false
	}
	return d, true
}

// emitFlash adds one flash kernel with its arguments (buffer ids).
func (g *gen) emitFlash(k flash.Kernel, args []int) {
	params := make([]Param, len(k.Params))
	for i, p := range k.Params {
		params[i] = Param{Name: p.Name, CType: p.CType, Out: p.Out}
	}
	g.emit(kernelSpec{op: k.Op, body: k.Body, grid: k.Grid, block: k.Block, shared: k.Shared,
		params: params, args: args})
}

// lowerFlash renders attention on the tensor-core kernels.
func lowerFlash(g *gen, n *ir.Node, d flash.Desc) error {
	k, err := flash.Forward(d)
	if err != nil {
		return err
	}
	q, kk, v := n.Args[0], n.Args[1], n.Args[2]
	g.emitFlash(k, []int{g.ids[n.Results[0]], g.ids[n.Results[1]], g.ids[q], g.ids[kk], g.ids[v]})
	return nil
}

// lowerFlashGrad renders the deterministic backward: delta into an f32 scratch
// buffer, then dK/dV per key tile and dQ per query tile.
func lowerFlashGrad(g *gen, n *ir.Node, d flash.Desc) error {
	q, k, v, o, lse, do := n.Args[0], n.Args[1], n.Args[2], n.Args[3], n.Args[4], n.Args[5]
	dq, dk, dv := n.Results[0], n.Results[1], n.Results[2]
	delta := g.temp(tensor.F32, d.B, int64(d.Hq), d.T)
	kd, err := flash.Delta(d)
	if err != nil {
		return err
	}
	kkv, err := flash.DKDV(d)
	if err != nil {
		return err
	}
	kq, err := flash.DQ(d)
	if err != nil {
		return err
	}
	id := func(x *ir.Value) int { return g.ids[x] }
	g.emitFlash(kd, []int{delta, id(o), id(do)})
	g.emitFlash(kkv, []int{id(dk), id(dv), id(q), id(k), id(v), id(do), id(lse), delta})
	g.emitFlash(kq, []int{id(dq), id(q), id(k), id(v), id(do), id(lse), delta})
	return nil
}
