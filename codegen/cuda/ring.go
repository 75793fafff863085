package cuda

import (
	"fmt"

	"github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Ring attention across ranks (docs/design.md §3; Liu et al., "Ring Attention
// with Blockwise Transformers", arXiv 2310.01889; the backward of
// ring-flash-attention). Each rank holds nc chunks of c positions of q, k and v
// (nc = 2 under the zigzag layout, 1 under the contiguous one). For N steps it
// attends its query chunks to the key chunks it holds, then passes k and v to
// rank+1; the backward passes dk and dv with them, and a last transfer brings
// them home.
//
// Blocks: with equal chunks, a causal block of query chunk qs against key chunk
// ks is the diagonal (ks = qs: causal attention over c rows), wholly visible
// (ks + c ≤ qs: non-causal attention) or wholly hidden (skipped). So every block
// is one of two kernels of the single-GPU tiers, whatever the rank and the step:
// the tensor-core kernels (codegen/cuda/flash, bf16, head dim 64 or 128) with
// Accumulate, which merge (o, lse) and add dq, dk, dv in fp32 themselves, or the
// scalar kernels of attention.go, whose block results an fp32 merge
// ("ring.merge", the overflow-free rule o ← o − σ(lse_b − lse)·(o − o_b),
// lse ← lse − log σ(lse − lse_b)) or an fp32 add ("ring.add") folds in.
//
// Layout: the blocks read chunk-major copies ([nc, B, c, ...]) so that a chunk
// is one contiguous [B, c, ...] tensor at an offset (Step.Offs): k and v travel
// in one buffer [2, nc, B, c, Hkv, D], dk and dv in one fp32 buffer of the same
// shape; lse and delta are [nc, B, Hq, c]. Accumulators are fp32; the results
// are moved back to [B, L, ...] and rounded once at the end.
//
// Overlap: the transfer of step s (a send_recv collective on the
// communicator's stream, into the other of two buffers) is queued before step
// s's kernels, so it runs while they do; the wait that codegen's deferWaits
// inserts before the next reader joins it. In the backward, dk and dv of step s
// are sent after step s's dK/dV kernels, and travel while step s+1's dQ kernels
// run. The order of every sum is fixed, so the results are bitwise
// reproducible.

// ringGeom is one rank's view of a ring attention node.
type ringGeom struct {
	n, rank          int
	b, l, hq, hkv, d int64
	nc, c            int64
	chunks           [][][2]int64 // per rank: the global (start, length) of its chunks
	causal           bool
	scale            float64
	st               tensor.DType // storage of q, k, v, o and their gradients
	flash            bool         // the tensor-core tier runs the blocks
}

// ringGeometry reads n's sizes for the rank being built.
func ringGeometry(g *gen, n *ir.Node) (ringGeom, error) {
	q, k := n.Args[0].Type, n.Args[1].Type
	rg := ringGeom{n: ir.Ranks(n), rank: g.opts.Rank, b: q.Shape[0], l: q.Shape[1], hq: q.Shape[2],
		hkv: k.Shape[2], d: q.Shape[3], causal: n.AttrBool("causal"), scale: ir.AttentionScale(n),
		st: g.storageOf(n.Args[0])}
	if rg.rank < 0 || rg.rank >= rg.n {
		return rg, fmt.Errorf("built for rank %d, but the program has %d ranks", rg.rank, rg.n)
	}
	layout := n.AttrString("layout")
	total := rg.l * int64(rg.n)
	if _, err := ir.LayoutLocal(layout, total, int64(rg.n)); err != nil {
		return rg, err
	}
	for r := range rg.n {
		rg.chunks = append(rg.chunks, ir.LayoutChunks(layout, total, int64(rg.n), int64(r)))
	}
	rg.nc = int64(len(rg.chunks[0]))
	rg.c = rg.l / rg.nc
	rg.flash = rg.st == tensor.BF16 && rg.desc(false).Check() == nil
	return rg, nil
}

// desc is the tensor-core descriptor of one block (B × c queries, c keys).
func (rg ringGeom) desc(causal bool) flash.Desc {
	return flash.Desc{B: rg.b, T: rg.c, S: rg.c, Hq: int(rg.hq), Hkv: int(rg.hkv), D: int(rg.d),
		Causal: causal, Scale: rg.scale, Accumulate: true}.Defaults()
}

// ringBlock is query chunk qi against key chunk kj of the k, v held at a step.
type ringBlock struct {
	qi, kj int64
	causal bool // the diagonal; otherwise wholly visible
}

// blocks lists, in a fixed order, the visible blocks of step s.
func (rg ringGeom) blocks(s int) []ringBlock {
	src := (rg.rank - s + rg.n) % rg.n
	var out []ringBlock
	for qi, qc := range rg.chunks[rg.rank] {
		for kj, kc := range rg.chunks[src] {
			switch {
			case !rg.causal || kc[0]+rg.c <= qc[0]:
				out = append(out, ringBlock{int64(qi), int64(kj), false})
			case kc[0] == qc[0]:
				out = append(out, ringBlock{int64(qi), int64(kj), true})
			}
		}
	}
	return out
}

// Element counts: a query chunk, a key chunk, an lse chunk, all of k.
func (rg ringGeom) cq() int64 { return rg.b * rg.c * rg.hq * rg.d }
func (rg ringGeom) ck() int64 { return rg.b * rg.c * rg.hkv * rg.d }
func (rg ringGeom) cl() int64 { return rg.b * rg.hq * rg.c }
func (rg ringGeom) nk() int64 { return rg.b * rg.l * rg.hkv * rg.d }

// ringTransfer queues one ring step: count elements of dt from buffer in to
// rank+1, and rank−1's into out.
func (g *gen) ringTransfer(n *ir.Node, what string, in, out int, count int64, dt tensor.DType) {
	g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "collective", Node: g.node,
		Op: n.Op.String() + "." + what, Args: []int{in, out},
		Coll: &Collective{Op: "send_recv", Count: count, DType: dt.String(), Shift: 1}})
}

// toChunks returns x [B, L, inner] (or, for lse and delta, [B·Hq, L] with
// inner 1) as a chunk-major [nc, B, c, inner] buffer: x itself when that is
// already its layout.
func (g *gen) toChunks(rg ringGeom, x int, dt tensor.DType, outer, inner int64) int {
	if outer == 1 || rg.nc == 1 {
		return x
	}
	t := g.temp(dt, rg.nc, outer, rg.c*inner)
	g.move(swap3{P: outer, Q: rg.nc, R: rg.c * inner}, t, 0, dt, x, 0, dt)
	return t
}

// fromChunks writes the chunk-major fp32 accumulator acc (from element off)
// into y [outer, nc·c, inner] in y's storage dtype.
func (g *gen) fromChunks(rg ringGeom, y int, dy tensor.DType, acc int, off, outer, inner int64) {
	g.move(swap3{P: rg.nc, Q: outer, R: rg.c * inner}, y, 0, dy, acc, off, tensor.F32)
}

// lowerRingAttention lowers ring attention on more than one rank.
func lowerRingAttention(g *gen, n *ir.Node) error {
	rg, err := ringGeometry(g, n)
	if err != nil {
		return err
	}
	id := func(x *ir.Value) int { return g.ids[x] }
	q, k, v := n.Args[0], n.Args[1], n.Args[2]
	nk := rg.nk()
	qc := g.toChunks(rg, id(q), rg.st, rg.b, rg.hq*rg.d)
	kv := [2]int{g.temp(rg.st, 2, nk), g.temp(rg.st, 2, nk)}
	g.packKV(rg, kv[0], id(k), id(v), rg.st)
	acc := g.temp(tensor.F32, rg.nc, rg.cq())
	lacc := g.temp(tensor.F32, rg.nc, rg.cl())
	g.emitFlash(flash.Fill(rg.nc*rg.cq(), 0), []int{acc})
	g.emitFlash(flash.Fill(rg.nc*rg.cl(), 0xff800000), []int{lacc})
	for s := range rg.n {
		cur := kv[s%2]
		if s < rg.n-1 {
			g.ringTransfer(n, "kv", cur, kv[(s+1)%2], 2*nk, rg.st)
		}
		for _, bl := range rg.blocks(s) {
			if err := g.ringForwardBlock(rg, n, bl, acc, lacc, qc, cur); err != nil {
				return err
			}
		}
	}
	g.fromChunks(rg, id(n.Results[0]), g.storageOf(n.Results[0]), acc, 0, rg.b, rg.hq*rg.d)
	g.fromChunks(rg, id(n.Results[1]), g.storageOf(n.Results[1]), lacc, 0, rg.b*rg.hq, 1)
	return nil
}

// packKV copies k and v [B, L, Hkv, D] into the travelling buffer kv
// [2, nc, B, c, Hkv, D].
func (g *gen) packKV(rg ringGeom, kv, k, v int, dt tensor.DType) {
	s := swap3{P: rg.b, Q: rg.nc, R: rg.c * rg.hkv * rg.d}
	g.move(s, kv, 0, dt, k, 0, dt)
	g.move(s, kv, rg.nk(), dt, v, 0, dt)
}

// ringForwardBlock merges one block into the running (acc, lacc).
func (g *gen) ringForwardBlock(rg ringGeom, n *ir.Node, bl ringBlock, acc, lacc, qc, kv int) error {
	qo, ko, lo := bl.qi*rg.cq(), bl.kj*rg.ck(), bl.qi*rg.cl()
	if rg.flash {
		k, err := flash.Forward(rg.desc(bl.causal))
		if err != nil {
			return err
		}
		g.emitFlashAt(k, []int{acc, lacc, qc, kv, kv}, []int64{qo, lo, qo, ko, rg.nk() + ko})
		return nil
	}
	ob := g.temp(rg.st, rg.cq())
	lb := g.temp(tensor.F32, rg.cl())
	if err := g.scalarBlockForward(rg, n, bl.causal, ob, lb, qc, kv, qo, ko); err != nil {
		return err
	}
	g.merge(mergeSpec{b: rg.b, tb: rg.c, tacc: rg.c, hq: rg.hq, d: rg.d, r: 1, ob: rg.st},
		acc, lacc, ob, lb, qo, lo)
	return nil
}

// lowerRingAttentionGrad lowers the backward: dq at home, dk and dv riding the
// ring with k and v.
func lowerRingAttentionGrad(g *gen, n *ir.Node) error {
	rg, err := ringGeometry(g, n)
	if err != nil {
		return err
	}
	id := func(x *ir.Value) int { return g.ids[x] }
	q, k, v, o, lse, do := n.Args[0], n.Args[1], n.Args[2], n.Args[3], n.Args[4], n.Args[5]
	nk := rg.nk()
	delta := g.temp(tensor.F32, rg.b, rg.hq, rg.l)
	if err := g.ringDelta(rg, n, delta, id(o), id(do)); err != nil {
		return err
	}
	qc := g.toChunks(rg, id(q), rg.st, rg.b, rg.hq*rg.d)
	doc := g.toChunks(rg, id(do), rg.st, rg.b, rg.hq*rg.d)
	lc := g.toChunks(rg, id(lse), g.storageOf(lse), rg.b*rg.hq, 1)
	dc := g.toChunks(rg, delta, tensor.F32, rg.b*rg.hq, 1)
	if g.storageOf(lse) != tensor.F32 {
		return fmt.Errorf("lse stored as %v, want f32", g.storageOf(lse))
	}
	kv := [2]int{g.temp(rg.st, 2, nk), g.temp(rg.st, 2, nk)}
	dkv := [2]int{g.temp(tensor.F32, 2, nk), g.temp(tensor.F32, 2, nk)}
	g.packKV(rg, kv[0], id(k), id(v), rg.st)
	dqa := g.temp(tensor.F32, rg.nc, rg.cq())
	g.emitFlash(flash.Fill(rg.nc*rg.cq(), 0), []int{dqa})
	g.emitFlash(flash.Fill(2*nk, 0), []int{dkv[0]})
	bufs := ringGradBufs{q: qc, do: doc, lse: lc, delta: dc, dqa: dqa}
	for s := range rg.n {
		bufs.kv, bufs.dkv = kv[s%2], dkv[s%2]
		if s < rg.n-1 {
			g.ringTransfer(n, "kv", bufs.kv, kv[(s+1)%2], 2*nk, rg.st)
		}
		for _, bl := range rg.blocks(s) {
			if err := g.ringDQBlock(rg, n, bl, bufs); err != nil {
				return err
			}
		}
		for _, bl := range rg.blocks(s) {
			if err := g.ringDKDVBlock(rg, n, bl, bufs); err != nil {
				return err
			}
		}
		g.ringTransfer(n, "dkv", bufs.dkv, dkv[(s+1)%2], 2*nk, tensor.F32)
	}
	home := dkv[rg.n%2]
	g.fromChunks(rg, id(n.Results[0]), g.storageOf(n.Results[0]), dqa, 0, rg.b, rg.hq*rg.d)
	g.fromChunks(rg, id(n.Results[1]), g.storageOf(n.Results[1]), home, 0, rg.b, rg.hkv*rg.d)
	g.fromChunks(rg, id(n.Results[2]), g.storageOf(n.Results[2]), home, nk, rg.b, rg.hkv*rg.d)
	return nil
}

// ringGradBufs are the buffers the backward's blocks read and add into.
type ringGradBufs struct {
	q, do, lse, delta, dqa int // chunk-major
	kv, dkv                int // the step's travelling buffers
}

// ringDelta writes delta [B, Hq, L] = rowsum(dO ⊙ O) for the whole local block.
func (g *gen) ringDelta(rg ringGeom, n *ir.Node, delta, o, do int) error {
	if rg.flash {
		d := rg.desc(false)
		d.T, d.S, d.Accumulate = rg.l, rg.l, false
		k, err := flash.Delta(d)
		if err != nil {
			return err
		}
		g.emitFlash(k, []int{delta, o, do})
		return nil
	}
	hdr, err := g.attnHeader(rg.blockNode(n, rg.l, false))
	if err != nil {
		return err
	}
	ct := storageC[rg.st]
	params := []Param{{Name: "delta", CType: "float", Out: true}, {Name: "o", CType: ct}, {Name: "dout", CType: ct}}
	g.emit(kernelSpec{op: "ring.delta", body: hdr + fmt.Sprintf(attnDelta, signature(params)),
		grid: [3]uint32{uint32((rg.l + 3) / 4), uint32(rg.hq), uint32(rg.b)}, block: [3]uint32{128, 1, 1},
		params: params, args: []int{delta, o, do}})
	return nil
}

// ringDQBlock adds one block's dq into the fp32 sum.
func (g *gen) ringDQBlock(rg ringGeom, n *ir.Node, bl ringBlock, b ringGradBufs) error {
	qo, ko, lo := bl.qi*rg.cq(), bl.kj*rg.ck(), bl.qi*rg.cl()
	if rg.flash {
		k, err := flash.DQ(rg.desc(bl.causal))
		if err != nil {
			return err
		}
		g.emitFlashAt(k, []int{b.dqa, b.q, b.kv, b.kv, b.do, b.lse, b.delta},
			[]int64{qo, qo, ko, rg.nk() + ko, qo, lo, lo})
		return nil
	}
	hdr, err := g.attnHeader(rg.blockNode(n, rg.c, bl.causal))
	if err != nil {
		return err
	}
	ct := storageC[rg.st]
	dqb := g.temp(tensor.F32, rg.cq())
	params := []Param{{Name: "dq", CType: "float", Out: true}, {Name: "q", CType: ct}, {Name: "k", CType: ct},
		{Name: "v", CType: ct}, {Name: "lse", CType: "float"}, {Name: "dout", CType: ct},
		{Name: "delta", CType: "float"}}
	g.emit(kernelSpec{op: "ring.dq", body: hdr + fmt.Sprintf(attnDQ, signature(params)),
		grid: [3]uint32{uint32((rg.c + 3) / 4), uint32(rg.hq), uint32(rg.b)}, block: [3]uint32{128, 1, 1},
		params: params, args: []int{dqb, b.q, b.kv, b.kv, b.lse, b.do, b.delta},
		offs: []int64{0, qo, ko, rg.nk() + ko, lo, qo, lo}})
	g.add(rg.cq(), b.dqa, qo, dqb, 0)
	return nil
}

// ringDKDVBlock adds one block's dk and dv into the travelling fp32 sums.
func (g *gen) ringDKDVBlock(rg ringGeom, n *ir.Node, bl ringBlock, b ringGradBufs) error {
	qo, ko, lo := bl.qi*rg.cq(), bl.kj*rg.ck(), bl.qi*rg.cl()
	nk := rg.nk()
	if rg.flash {
		k, err := flash.DKDV(rg.desc(bl.causal))
		if err != nil {
			return err
		}
		g.emitFlashAt(k, []int{b.dkv, b.dkv, b.q, b.kv, b.kv, b.do, b.lse, b.delta},
			[]int64{ko, nk + ko, qo, ko, nk + ko, qo, lo, lo})
		return nil
	}
	hdr, err := g.attnHeader(rg.blockNode(n, rg.c, bl.causal))
	if err != nil {
		return err
	}
	ct := storageC[rg.st]
	dkb := g.temp(tensor.F32, 2, rg.ck())
	params := []Param{{Name: "dk", CType: "float", Out: true}, {Name: "dv", CType: "float", Out: true},
		{Name: "q", CType: ct}, {Name: "k", CType: ct}, {Name: "v", CType: ct}, {Name: "lse", CType: "float"},
		{Name: "dout", CType: ct}, {Name: "delta", CType: "float"}}
	g.emit(kernelSpec{op: "ring.dkdv", body: hdr + fmt.Sprintf(attnDKDV, signature(params)),
		grid: [3]uint32{uint32((rg.c + 3) / 4), uint32(rg.hkv), uint32(rg.b)}, block: [3]uint32{128, 1, 1},
		params: params, args: []int{dkb, dkb, b.q, b.kv, b.kv, b.lse, b.do, b.delta},
		offs: []int64{0, rg.ck(), qo, ko, nk + ko, lo, qo, lo}})
	g.add(rg.ck(), b.dkv, ko, dkb, 0)
	g.add(rg.ck(), b.dkv, nk+ko, dkb, rg.ck())
	return nil
}

// blockNode is a stand-in attention node of rows queries and keys with n's
// heads, head dim and scale, for the scalar kernels' header.
func (rg ringGeom) blockNode(n *ir.Node, rows int64, causal bool) *ir.Node {
	qv := &ir.Value{Type: ir.T(tensor.F32, rg.b, rows, rg.hq, rg.d)}
	kv := &ir.Value{Type: ir.T(tensor.F32, rg.b, rows, rg.hkv, rg.d)}
	return &ir.Node{Op: ir.OpAttention, Attrs: ir.A("causal", causal, "scale", rg.scale),
		Args: []*ir.Value{qv, kv, kv}}
}

// scalarBlockForward runs the scalar forward kernel on one block into ob, lb.
func (g *gen) scalarBlockForward(rg ringGeom, n *ir.Node, causal bool, ob, lb, qc, kv int, qo, ko int64) error {
	hdr, err := g.attnHeader(rg.blockNode(n, rg.c, causal))
	if err != nil {
		return err
	}
	ct := storageC[rg.st]
	params := []Param{{Name: "o", CType: ct, Out: true}, {Name: "lse", CType: "float", Out: true},
		{Name: "q", CType: ct}, {Name: "k", CType: ct}, {Name: "v", CType: ct}}
	g.emit(kernelSpec{op: "ring.fwd", body: hdr + fmt.Sprintf(attnForward, signature(params)),
		grid: [3]uint32{uint32((rg.c + 3) / 4), uint32(rg.hq), uint32(rg.b)}, block: [3]uint32{128, 1, 1},
		params: params, args: []int{ob, lb, qc, kv, kv}, offs: []int64{0, 0, qo, ko, rg.nk() + ko}})
	return nil
}

// emitFlashAt is emitFlash with an element offset per argument.
func (g *gen) emitFlashAt(k flash.Kernel, args []int, offs []int64) {
	params := make([]Param, len(k.Params))
	for i, p := range k.Params {
		params[i] = Param{Name: p.Name, CType: p.CType, Out: p.Out}
	}
	g.emit(kernelSpec{op: k.Op, body: k.Body, grid: k.Grid, block: k.Block, shared: k.Shared,
		params: params, args: args, offs: offs})
}

// move copies buffer src (from element srcOff, dtype dx) viewed as [P, Q, R]
// into dst (from element dstOff, dtype dy) as [Q, P, R], converting through
// fp32 when the dtypes differ (P or Q = 1 is a plain copy).
func (g *gen) move(s swap3, dst int, dstOff int64, dy tensor.DType, src int, srcOff int64, dx tensor.DType) {
	n := s.P * s.Q * s.R
	if n == 0 {
		return
	}
	it := idxType(n)
	val := fmt.Sprintf("x[(p * %d + q) * %d + r]", s.Q, s.R)
	if dx != dy {
		val = store(dy, load(dx, val))
	}
	var body string
	if s.P == 1 || s.Q == 1 {
		val = "x[i]"
		if dx != dy {
			val = store(dy, load(dx, val))
		}
		body = fmt.Sprintf("    y[i] = %s;\n", val)
	} else {
		body = fmt.Sprintf("    const %[1]s r = i %% %[2]d, t = i / %[2]d, p = t %% %[3]d, q = t / %[3]d;\n"+
			"    y[i] = %[4]s;\n", it, s.R, s.P, val)
	}
	var src2 = fmt.Sprintf("// move %v [%d,%d,%d] -> %v [%d,%d,%d]\n", dx, s.P, s.Q, s.R, dy, s.Q, s.P, s.R) +
		fmt.Sprintf("extern \"C\" __global__ void __launch_bounds__(256) @KERNEL@(%s) {\n",
			signature([]Param{{Name: "y", CType: storageC[dy], Out: true}, {Name: "x", CType: storageC[dx]}})) +
		gridStride(it, n) + body + "  }\n}\n"
	grid, block := flatGrid(n)
	g.emit(kernelSpec{op: "ring.move", body: src2, grid: grid, block: block,
		params: []Param{{Name: "y", CType: storageC[dy], Out: true}, {Name: "x", CType: storageC[dx]}},
		args:   []int{dst, src}, offs: []int64{dstOff, srcOff}})
}

// add adds n fp32 elements of src (from srcOff) into dst (from dstOff).
func (g *gen) add(n int64, dst int, dstOff int64, src int, srcOff int64) {
	params := []Param{{Name: "y", CType: "float", Out: true}, {Name: "x", CType: "float"}}
	body := fmt.Sprintf("// add f32[%d]\nextern \"C\" __global__ void __launch_bounds__(256) @KERNEL@(%s) {\n",
		n, signature(params)) + gridStride(idxType(n), n) + "    y[i] += x[i];\n  }\n}\n"
	grid, block := flatGrid(n)
	g.emit(kernelSpec{op: "ring.add", body: body, grid: grid, block: block, params: params,
		args: []int{dst, src}, offs: []int64{dstOff, srcOff}})
}

// mergeSpec shapes a merge of block results (o_b [B, tb, Hq, D] stored as ob,
// lse_b [B, Hq, tb] fp32) into a running fp32 (o [B, tacc, Hq, D], lse
// [B, Hq, tacc]): block row i of head h is accumulator row base + o(h) + i·r,
// with the LongNet head offset o(h) for dilation r (0 when r = 1).
type mergeSpec struct {
	b, tb, tacc, hq, d int64
	r                  int64
	offsBlock          bool
	base               int64
	ob                 tensor.DType
}

// merge emits the fp32 merge of docs/design.md §3 without overflow:
// o ← o − σ(lse_b − lse)·(o − o_b), lse ← max + log1p(exp(−|lse − lse_b|)).
// A row the block does not see (lse_b = −∞) is left alone; one thread per row.
func (g *gen) merge(m mergeSpec, acc, lacc, ob, lb int, accOff, laccOff int64) {
	params := []Param{{Name: "acc", CType: "float", Out: true}, {Name: "lacc", CType: "float", Out: true},
		{Name: "ob", CType: storageC[m.ob]}, {Name: "lb", CType: "float"}}
	rows := m.b * m.hq * m.tb
	body := fmt.Sprintf(`// merge: B=%[1]d rows %[2]d into %[3]d, Hq=%[4]d, D=%[5]d, r=%[6]d, base %[7]d, block offsets %[8]d
extern "C" __global__ void __launch_bounds__(256) @KERNEL@(%[9]s) {
  const long long row = (long long)blockIdx.x * 256 + threadIdx.x;
  if (row >= %[10]dLL) return;
  const long long i = row %% %[2]dLL, bh = row / %[2]dLL;
  const int h = (int)(bh %% %[4]d);
  const long long b = bh / %[4]d;
  const long long p = %[7]dLL + (%[6]d > 1 ? lcc_head_offset(h, %[4]d, %[6]d, %[8]d) : 0) + i * %[6]dLL;
  const float l2 = lb[bh * %[2]dLL + i];
  if (l2 == -LCC_INF) return;
  float* la = lacc + (b * %[4]d + h) * %[3]dLL + p;
  float* o = acc + ((b * %[3]dLL + p) * %[4]d + h) * %[5]d;
  const %[11]s* x = ob + ((b * %[2]dLL + i) * %[4]d + h) * %[5]d;
  const float l1 = *la;
  if (l1 == -LCC_INF) {
    for (int d = 0; d < %[5]d; ++d) o[d] = lcc_tof(x[d]);
    *la = l2;
    return;
  }
  const float w = 1.0f / (1.0f + expf(l1 - l2));
  for (int d = 0; d < %[5]d; ++d) o[d] -= w * (o[d] - lcc_tof(x[d]));
  *la = fmaxf(l1, l2) + log1pf(expf(-fabsf(l1 - l2)));
}
`, m.b, m.tb, m.tacc, m.hq, m.d, m.r, m.base, b2i(m.offsBlock), signature(params), rows, storageC[m.ob])
	g.emit(kernelSpec{op: "ring.merge", body: body, grid: [3]uint32{uint32((rows + 255) / 256), 1, 1},
		block: [3]uint32{256, 1, 1}, params: params, args: []int{acc, lacc, ob, lb},
		offs: []int64{accOff, laccOff, 0, 0}})
}
