package cuda

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// The kernels an attention node can run on (AttentionChoice.Kernel).
const (
	// KernelFlash is package flash's tensor-core kernels: tier 1
	// (FlashAttention-2's algorithm on mma.sync) or tier 2 (wgmma, sm_90a).
	KernelFlash = "flash"
	// KernelScalar is the fallback: the CUDA-core kernels of attention.go (fp32
	// math, any head dim, explicit masks).
	KernelScalar = "scalar"
)

// AttentionChoice says which kernels one attention node of the step runs on, and
// why not on the tensor cores when it does not.
type AttentionChoice struct {
	Node int    `json:"node"` // index in Func.Body
	Op   string `json:"op"`   // attention, attention_grad, dilated_attention, ...
	Name string `json:"name,omitempty"`
	// Kernel is KernelFlash or KernelScalar; Tier is the flash tier (0 for
	// scalar).
	Kernel string `json:"kernel"`
	Tier   int    `json:"tier,omitempty"`
	// Why says why the tensor-core tier did not take the node ("" when it did).
	Why string `json:"why,omitempty"`
	// Note says what the tensor-core kernels do differently for the node: a
	// head dim computed padded, a sliding window, a tier other than the
	// target's ("" when none).
	Note string `json:"note,omitempty"`
}

// chooseAttention returns the tensor-core kernel descriptor of attention node n,
// or why the tensor-core tier does not take it, and records the choice in the
// program.
func (g *gen) chooseAttention(n *ir.Node) (flash.Desc, error) {
	d, err := g.flashDesc(n)
	if err == nil && g.opts.ScalarAttention {
		err = errors.New("the scalar kernels were asked for (Options.ScalarAttention)")
	}
	c := AttentionChoice{Node: g.node, Op: n.Op.String(), Name: n.Name, Kernel: KernelFlash, Tier: d.Tier}
	if err != nil {
		c.Kernel, c.Tier, c.Why = KernelScalar, 0, err.Error()
	} else {
		c.Note = flashNote(d, flash.TierFor(g.opts.Arch))
	}
	g.prog.Attention = append(g.prog.Attention, c)
	return d, err
}

// flashNote says what the kernels of d do differently from the plain case,
// for the report: a head dim padded to the kernels' (flash.Desc.KD), tier 1 on
// a tier-2 target, a sliding window.
func flashNote(d flash.Desc, tier int) string {
	var notes []string
	if d.KD() != d.D {
		notes = append(notes, fmt.Sprintf("head dim %d computed at %d", d.D, d.KD()))
	}
	if d.Tier < tier {
		notes = append(notes, fmt.Sprintf("tier %d: tier %d stops at head dim 128", d.Tier, tier))
	}
	if d.Window > 0 {
		notes = append(notes, fmt.Sprintf("sliding window %d", d.Window))
	}
	return strings.Join(notes, ", ")
}

// flashDesc returns the tensor-core kernel descriptor of attention node n, or
// why the tensor-core tier does not take it. It takes dense or dilated attention
// without an explicit mask, causal or not, with q, k, v and o stored in bf16 and
// a head dim that is a multiple of 8 up to 128 (flash.Desc.KD). Everything else (f32 storage, other head dims, masks) keeps
// the scalar kernels of attention.go; the plan's step op says which one ran
// ("attention.flash.*" or "attention").
func (g *gen) flashDesc(n *ir.Node) (flash.Desc, error) {
	dilated := n.Op == ir.OpDilatedAttention || n.Op == ir.OpDilatedAttentionGrad
	if n.Op != ir.OpAttention && n.Op != ir.OpAttentionGrad && !dilated {
		return flash.Desc{}, fmt.Errorf("op %s", n.Op)
	}
	fwd := n.Op == ir.OpAttention || n.Op == ir.OpDilatedAttention
	want := 6
	if fwd {
		want = 3
	}
	if ir.HasDocs(n) {
		want++ // the doc starts, which the kernels take as the document mask
	}
	if len(n.Args) != want {
		return flash.Desc{}, errors.New("an explicit mask")
	}
	bf16 := []*ir.Value{n.Args[0], n.Args[1], n.Args[2]}
	if fwd {
		bf16 = append(bf16, n.Results[0])
	} else {
		bf16 = append(bf16, n.Args[3], n.Args[5], n.Results[0], n.Results[1], n.Results[2])
	}
	for _, v := range bf16 {
		if dt := g.storageOf(v); dt != tensor.BF16 {
			return flash.Desc{}, fmt.Errorf("storage %v: the tensor-core kernels take bf16", dt)
		}
	}
	if !fwd && g.storageOf(n.Args[4]) != tensor.F32 {
		return flash.Desc{}, fmt.Errorf("lse stored as %v: the tensor-core kernels take f32", g.storageOf(n.Args[4]))
	}
	d := FlashDescOf(n, flash.TierFor(g.opts.Arch))
	if err := d.Check(); err != nil {
		return flash.Desc{}, err
	}
	if dilated {
		for _, bd := range flashBranches(n, d) {
			if err := bd.Check(); err != nil {
				return flash.Desc{}, fmt.Errorf("branch w=%d r=%d: %w", bd.W, bd.R, err)
			}
		}
	}
	return d, nil
}

// FlashDescOf is the descriptor, tiles included, of the tensor-core kernels that
// attention node n (dense or dilated, forward or backward, without a mask) runs on
// at tier: what an AttentionChoice of kernel KernelFlash stands for. A dilated
// node's branches share its tiles (flashBranches). The CPU's emulation of a
// program reads the forward's key tile from it (driver/emulate.go).
func FlashDescOf(n *ir.Node, tier int) flash.Desc {
	q, k := n.Args[0].Type, n.Args[1].Type
	tier = flash.TierForHeadDim(tier, int(q.Shape[3]))
	d := flash.Desc{B: q.Shape[0], T: q.Shape[1], S: k.Shape[1], Hq: int(q.Shape[2]), Hkv: int(k.Shape[2]),
		D: int(q.Shape[3]), Causal: n.AttrBool("causal"), Docs: ir.HasDocs(n), Window: ir.Window(n),
		Scale: ir.AttentionScale(n),
		Tier:  tier}
	if n.Op == ir.OpDilatedAttention || n.Op == ir.OpDilatedAttentionGrad {
		d.Offsets = n.AttrString("offsets")
	}
	d = d.Defaults()
	if n.Op == ir.OpAttentionGrad {
		d.SplitHeads = flash.SplitsHeads(d)
	}
	return d
}

// flashBranches is the descriptor of each LongNet branch of dilated attention n:
// the shape of d with the branch's segment and dilation, accumulating into fp32.
func flashBranches(n *ir.Node, d flash.Desc) []flash.Desc {
	seg, dil := n.AttrInts("segments"), n.AttrInts("dilations")
	var out []flash.Desc
	for i := range seg {
		bd := d
		bd.W, bd.R, bd.Accumulate = seg[i], int(dil[i]), true
		if bd.W >= d.T && bd.R == 1 {
			bd.W = d.T
		}
		out = append(out, bd)
	}
	return out
}

// lowerFlashDilated renders dilated attention as a chain of launches over fp32
// scratch: the running output := 0 and lse := −Inf, each branch's strided causal
// attention merged in branch order, then the output rounded to bf16.
func lowerFlashDilated(g *gen, n *ir.Node, d flash.Desc) error {
	q, k, v := n.Args[0], n.Args[1], n.Args[2]
	o, lse := g.ids[n.Results[0]], g.ids[n.Results[1]]
	nq := d.B * d.T * int64(d.Hq) * int64(d.D)
	acc := g.temp(tensor.F32, d.B, d.T, int64(d.Hq), int64(d.D))
	g.emitFlash(flash.Fill(nq, 0), []int{acc})
	g.emitFlash(flash.Fill(d.B*int64(d.Hq)*d.T, 0xff800000), []int{lse})
	for _, bd := range flashBranches(n, d) {
		k1, err := flash.Forward(bd)
		if err != nil {
			return err
		}
		g.emitFlash(k1, []int{acc, lse, g.ids[q], g.ids[k], g.ids[v]})
	}
	g.emitFlash(flash.Convert(nq), []int{o, acc})
	return nil
}

// lowerFlashDilatedGrad renders the exact backward (docs/design.md §3): delta from the
// merged output, then per branch dK/dV (per group member when grouped-query heads
// select different rows) and dQ with the global lse and delta, summed in fp32 in
// branch order (bitwise reproducible), then rounded to bf16.
func lowerFlashDilatedGrad(g *gen, n *ir.Node, d flash.Desc) error {
	q, k, v, o, lse, do := n.Args[0], n.Args[1], n.Args[2], n.Args[3], n.Args[4], n.Args[5]
	id := func(x *ir.Value) int { return g.ids[x] }
	nq := d.B * d.T * int64(d.Hq) * int64(d.D)
	nk := d.B * d.T * int64(d.Hkv) * int64(d.D)
	delta := g.temp(tensor.F32, d.B, int64(d.Hq), d.T)
	dqa := g.temp(tensor.F32, d.B, d.T, int64(d.Hq), int64(d.D))
	dka := g.temp(tensor.F32, d.B, d.T, int64(d.Hkv), int64(d.D))
	dva := g.temp(tensor.F32, d.B, d.T, int64(d.Hkv), int64(d.D))
	kd, err := flash.Delta(d)
	if err != nil {
		return err
	}
	// dK and dV of every branch first, then dQ: the dQ sum's scratch starts after
	// the dK sum's ends, so the arena gives them the same memory.
	g.emitFlash(kd, []int{delta, id(o), id(do)})
	g.emitFlash(flash.Fill(nk, 0), []int{dka})
	g.emitFlash(flash.Fill(nk, 0), []int{dva})
	brs := flashBranches(n, d)
	for _, bd := range brs {
		for _, md := range bd.Members() {
			kk, err := flash.DKDV(md)
			if err != nil {
				return err
			}
			g.emitFlash(kk, []int{dka, dva, id(q), id(k), id(v), id(do), id(lse), delta})
		}
	}
	g.emitFlash(flash.Convert(nk), []int{id(n.Results[1]), dka})
	g.emitFlash(flash.Convert(nk), []int{id(n.Results[2]), dva})
	g.emitFlash(flash.Fill(nq, 0), []int{dqa})
	for _, bd := range brs {
		kq, err := flash.DQ(bd)
		if err != nil {
			return err
		}
		g.emitFlash(kq, []int{dqa, id(q), id(k), id(v), id(do), id(lse), delta})
	}
	g.emitFlash(flash.Convert(nq), []int{id(n.Results[0]), dqa})
	return nil
}

// withDocs appends the doc starts of n, when it has a document mask, to a flash
// kernel's arguments: the kernels declare them last (flash.Desc.Docs).
func (g *gen) withDocs(n *ir.Node, args []int) []int {
	if s := ir.DocStarts(n); s != nil {
		args = append(args, g.ids[s])
	}
	return args
}

// emitFlash adds one flash kernel with its arguments (buffer ids).
func (g *gen) emitFlash(k flash.Kernel, args []int) {
	params := make([]Param, len(k.Params))
	for i, p := range k.Params {
		params[i] = Param{Name: p.Name, CType: p.CType, Out: p.Out}
	}
	g.emit(kernelSpec{op: k.Op, body: k.Body, grid: k.Grid, block: k.Block, shared: k.Shared,
		params: params, args: args, arch: k.Arch})
}

// lowerFlash renders attention on the tensor-core kernels.
func lowerFlash(g *gen, n *ir.Node, d flash.Desc) error {
	if n.Op == ir.OpDilatedAttention {
		return lowerFlashDilated(g, n, d)
	}
	views, err := g.flashViews(n)
	if err != nil {
		return err
	}
	d.Views = views
	k, err := flash.Forward(d)
	if err != nil {
		return err
	}
	q, kk, v := n.Args[0], n.Args[1], n.Args[2]
	g.emitFlash(k, g.withDocs(n, []int{g.ids[n.Results[0]], g.ids[n.Results[1]], g.bufOf(q), g.bufOf(kk), g.bufOf(v)}))
	return nil
}

// lowerFlashGrad renders the deterministic backward: delta into an f32 scratch
// buffer, then dK/dV per key tile with dQ summed in 64-bit fixed point
// (flash.DQFused: one more scratch buffer, the sum and the maxima of its bound,
// zeroed first, then rounded to bf16), or dQ per query tile (flash.DQSplit).
func lowerFlashGrad(g *gen, n *ir.Node, d flash.Desc) error {
	if n.Op == ir.OpDilatedAttentionGrad {
		return lowerFlashDilatedGrad(g, n, d)
	}
	q, k, v, o, lse, do := n.Args[0], n.Args[1], n.Args[2], n.Args[3], n.Args[4], n.Args[5]
	dq, dk, dv := n.Results[0], n.Results[1], n.Results[2]
	views, err := g.flashViews(n)
	if err != nil {
		return err
	}
	d.Views = views
	delta := g.temp(tensor.F32, d.B, int64(d.Hq), d.T)
	kd, err := flash.Delta(d)
	if err != nil {
		return err
	}
	kkv, err := flash.DKDV(d)
	if err != nil {
		return err
	}
	id := g.bufOf // a view's root, or the value's own buffer (attention_views.go)
	g.emitFlash(kd, []int{delta, id(o), id(do)})
	if d.Defaults().Fused() {
		kb, err := flash.DQBound(d)
		if err != nil {
			return err
		}
		kc, err := flash.ConvertDQ(d)
		if err != nil {
			return err
		}
		nw := d.DQWorkspace()
		ws := g.temp(tensor.F32, nw)
		g.emitFlash(flash.Fill(nw, 0), []int{ws})
		g.emitFlash(kb, []int{ws, id(do), id(k), id(v), delta})
		if !d.SplitHeads {
			g.emitFlash(kkv, g.withDocs(n, []int{id(dk), id(dv), id(q), id(k), id(v), id(do), id(lse), delta, ws}))
		} else {
			// Each query head's parts of dK and dV, summed by the group after.
			kr, err := flash.DKVReduce(d)
			if err != nil {
				return err
			}
			pk, pv := g.temp(tensor.F32, d.B, d.S, int64(d.Hq), int64(d.D)), g.temp(tensor.F32, d.B, d.S, int64(d.Hq), int64(d.D))
			g.emitFlash(kkv, g.withDocs(n, []int{pk, pv, id(q), id(k), id(v), id(do), id(lse), delta, ws}))
			g.emitFlash(kr, []int{id(dk), id(dv), pk, pv})
		}
		g.emitFlash(kc, []int{id(dq), ws})
		return nil
	}
	kq, err := flash.DQ(d)
	if err != nil {
		return err
	}
	g.emitFlash(kkv, []int{id(dk), id(dv), id(q), id(k), id(v), id(do), id(lse), delta})
	g.emitFlash(kq, []int{id(dq), id(q), id(k), id(v), id(do), id(lse), delta})
	return nil
}
