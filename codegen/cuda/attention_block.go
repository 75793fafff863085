package cuda

import (
	"fmt"

	"github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Attention blocks: the unit of sequence-parallel attention (ring.go,
// dilated_shard.go). A block is B × rows queries against rows keys, either the
// diagonal (causal) or wholly visible (not causal), and its results are folded
// into fp32 running sums: (o, lse) by the merge of docs/design.md §3, dq, dk and
// dv by addition, each in a fixed order. Every operand is a buffer id with an
// element offset, so a block reads a chunk of a larger buffer in place.
//
// Two tiers, as for single-GPU attention: the tensor-core kernels (package
// flash, bf16 storage, head dim a multiple of 8 up to 128) with Accumulate, which merge and add
// into the fp32 sums themselves; otherwise the scalar kernels of attention.go,
// which write a block result that ring.merge or ring.add folds in.

// blockGeom is the shape of the blocks of one op.
type blockGeom struct {
	b, rows, hq, hkv, d int64
	scale               float64
	st                  tensor.DType // storage of q, k, v, do
	flash               bool
	why                 error // why not the tensor-core tier (nil when flash)
}

// newBlockGeom picks the tier: the tensor-core kernels when the storage is bf16
// and the descriptor checks.
func newBlockGeom(b, rows, hq, hkv, d int64, scale float64, st tensor.DType) blockGeom {
	bg := blockGeom{b: b, rows: rows, hq: hq, hkv: hkv, d: d, scale: scale, st: st}
	if st != tensor.BF16 {
		bg.why = fmt.Errorf("storage %v: the tensor-core kernels take bf16", st)
	} else {
		bg.why = bg.desc(false).Check()
	}
	bg.flash = bg.why == nil
	return bg
}

// recordChoice records which kernels sequence-parallel attention node n runs
// its blocks on (Program.Attention), as chooseAttention does for attention.
func (g *gen) recordChoice(n *ir.Node, why error) {
	c := AttentionChoice{Node: g.node, Op: n.Op.String(), Name: n.Name, Kernel: KernelFlash, Tier: 1}
	if why != nil {
		c.Kernel, c.Tier, c.Why = KernelScalar, 0, why.Error()
	}
	g.prog.Attention = append(g.prog.Attention, c)
}

// desc is the tensor-core descriptor of a block.
func (bg blockGeom) desc(causal bool) flash.Desc {
	return flash.Desc{B: bg.b, T: bg.rows, S: bg.rows, Hq: int(bg.hq), Hkv: int(bg.hkv), D: int(bg.d),
		Causal: causal, Scale: bg.scale, Accumulate: true}.Defaults()
}

// Element counts of one block's q (and o, dq), k (and v, dk, dv), and lse.
func (bg blockGeom) nq() int64 { return bg.b * bg.rows * bg.hq * bg.d }
func (bg blockGeom) nk() int64 { return bg.b * bg.rows * bg.hkv * bg.d }
func (bg blockGeom) nl() int64 { return bg.b * bg.hq * bg.rows }

// at is a buffer and an element offset into it.
type at struct {
	id  int
	off int64
}

// blockBufs are the operands of one block.
type blockBufs struct {
	q, k, v, do, lse, delta at // lse and delta: the global ones (backward)
}

// blockNode is a stand-in attention node of the block's shape, for the scalar
// kernels' header.
func (bg blockGeom) blockNode(rows int64, causal bool) *ir.Node {
	qv := &ir.Value{Type: ir.T(tensor.F32, bg.b, rows, bg.hq, bg.d)}
	kv := &ir.Value{Type: ir.T(tensor.F32, bg.b, rows, bg.hkv, bg.d)}
	return &ir.Node{Op: ir.OpAttention, Attrs: ir.A("causal", causal, "scale", bg.scale),
		Args: []*ir.Value{qv, kv, kv}}
}

// header renders the scalar kernels' header for a block.
func (g *gen) blockHeader(bg blockGeom, rows int64, causal bool) (string, error) {
	return g.attnHeader(bg.blockNode(rows, causal))
}

// blockForward merges one block into the running fp32 (acc, lacc).
func (g *gen) blockForward(bg blockGeom, causal bool, acc, lacc at, x blockBufs) error {
	if bg.flash {
		k, err := flash.Forward(bg.desc(causal))
		if err != nil {
			return err
		}
		g.emitFlashAt(k, []at{acc, lacc, x.q, x.k, x.v})
		return nil
	}
	hdr, err := g.blockHeader(bg, bg.rows, causal)
	if err != nil {
		return err
	}
	ob := g.temp(bg.st, bg.nq())
	lb := g.temp(tensor.F32, bg.nl())
	ct := storageC[bg.st]
	params := []Param{{Name: "o", CType: ct, Out: true}, {Name: "lse", CType: "float", Out: true},
		{Name: "q", CType: ct}, {Name: "k", CType: ct}, {Name: "v", CType: ct}}
	g.emitAt("ring.fwd", hdr+fmt.Sprintf(attnForward, signature(params)), bg.scalarGrid(bg.hq), params,
		[]at{{ob, 0}, {lb, 0}, x.q, x.k, x.v})
	g.merge(mergeSpec{b: bg.b, tb: bg.rows, tacc: bg.rows, hq: bg.hq, d: bg.d, r: 1, ob: bg.st},
		acc, lacc, at{ob, 0}, at{lb, 0})
	return nil
}

// scalarGrid is the scalar kernels' grid: four rows a block, by heads and batch.
func (bg blockGeom) scalarGrid(heads int64) [3]uint32 {
	return [3]uint32{uint32((bg.rows + 3) / 4), uint32(heads), uint32(bg.b)}
}

// blockDQ adds one block's dq into the fp32 sum dqa.
func (g *gen) blockDQ(bg blockGeom, causal bool, dqa at, x blockBufs) error {
	if bg.flash {
		k, err := flash.DQ(bg.desc(causal))
		if err != nil {
			return err
		}
		g.emitFlashAt(k, []at{dqa, x.q, x.k, x.v, x.do, x.lse, x.delta})
		return nil
	}
	hdr, err := g.blockHeader(bg, bg.rows, causal)
	if err != nil {
		return err
	}
	ct := storageC[bg.st]
	dqb := g.temp(tensor.F32, bg.nq())
	params := []Param{{Name: "dq", CType: "float", Out: true}, {Name: "q", CType: ct}, {Name: "k", CType: ct},
		{Name: "v", CType: ct}, {Name: "lse", CType: "float"}, {Name: "dout", CType: ct},
		{Name: "delta", CType: "float"}}
	g.emitAt("ring.dq", hdr+fmt.Sprintf(attnDQ, signature(params)), bg.scalarGrid(bg.hq), params,
		[]at{{dqb, 0}, x.q, x.k, x.v, x.lse, x.do, x.delta})
	g.add(bg.nq(), dqa, at{dqb, 0})
	return nil
}

// blockDKDV adds one block's dk and dv into the fp32 sums dk and dv.
func (g *gen) blockDKDV(bg blockGeom, causal bool, dk, dv at, x blockBufs) error {
	if bg.flash {
		k, err := flash.DKDV(bg.desc(causal))
		if err != nil {
			return err
		}
		g.emitFlashAt(k, []at{dk, dv, x.q, x.k, x.v, x.do, x.lse, x.delta})
		return nil
	}
	hdr, err := g.blockHeader(bg, bg.rows, causal)
	if err != nil {
		return err
	}
	ct := storageC[bg.st]
	dkb := g.temp(tensor.F32, 2, bg.nk())
	params := []Param{{Name: "dk", CType: "float", Out: true}, {Name: "dv", CType: "float", Out: true},
		{Name: "q", CType: ct}, {Name: "k", CType: ct}, {Name: "v", CType: ct}, {Name: "lse", CType: "float"},
		{Name: "dout", CType: ct}, {Name: "delta", CType: "float"}}
	g.emitAt("ring.dkdv", hdr+fmt.Sprintf(attnDKDV, signature(params)), bg.scalarGrid(bg.hkv), params,
		[]at{{dkb, 0}, {dkb, bg.nk()}, x.q, x.k, x.v, x.lse, x.do, x.delta})
	g.add(bg.nk(), dk, at{dkb, 0})
	g.add(bg.nk(), dv, at{dkb, bg.nk()})
	return nil
}

// blockDelta writes delta [B, Hq, rows] = rowsum(dO ⊙ O) (o, do [B, rows, Hq, D]).
func (g *gen) blockDelta(bg blockGeom, delta, o, do at) error {
	if bg.flash {
		k, err := flash.Delta(bg.desc(false))
		if err != nil {
			return err
		}
		g.emitFlashAt(k, []at{delta, o, do})
		return nil
	}
	hdr, err := g.blockHeader(bg, bg.rows, false)
	if err != nil {
		return err
	}
	ct := storageC[bg.st]
	params := []Param{{Name: "delta", CType: "float", Out: true}, {Name: "o", CType: ct}, {Name: "dout", CType: ct}}
	g.emitAt("ring.delta", hdr+fmt.Sprintf(attnDelta, signature(params)), bg.scalarGrid(bg.hq), params,
		[]at{delta, o, do})
	return nil
}

// emitAt emits a kernel of 128-thread blocks with its operands at offsets.
func (g *gen) emitAt(op, body string, grid [3]uint32, params []Param, args []at) {
	ids, offs := split(args)
	g.emit(kernelSpec{op: op, body: body, grid: grid, block: [3]uint32{128, 1, 1}, params: params,
		args: ids, offs: offs})
}

// emitFlashAt is emitFlash with operands at offsets.
func (g *gen) emitFlashAt(k flash.Kernel, args []at) {
	params := make([]Param, len(k.Params))
	for i, p := range k.Params {
		params[i] = Param{Name: p.Name, CType: p.CType, Out: p.Out}
	}
	ids, offs := split(args)
	g.emit(kernelSpec{op: k.Op, body: k.Body, grid: k.Grid, block: k.Block, shared: k.Shared,
		params: params, args: ids, offs: offs})
}

// split separates operands into buffer ids and offsets.
func split(args []at) ([]int, []int64) {
	ids, offs := make([]int, len(args)), make([]int64, len(args))
	for i, a := range args {
		ids[i], offs[i] = a.id, a.off
	}
	return ids, offs
}
