package cuda

import (
	"fmt"
	"strings"

	"github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Dilated attention across ranks (LongNet §3.1, arXiv 2307.02486;
// docs/design.md §3). Each rank holds a contiguous block of L positions. A
// branch (w, r) whose segments tile the block (L mod w = 0, w < T) is local: its
// kernels run on the rank's q, k, v as on one GPU. Any other branch is "far":
// each rank selects, per query head h, the rows o(h) + i·r of its block (the
// rows LongNet's sparsification keeps; L/r of them), all-gathers the selected k
// and v, and attends its selected queries to the selected keys of the ranks in
// its segment, in compact coordinates where the branch is plain attention: a
// rank's own rows are the causal diagonal block and an earlier rank's rows are
// wholly visible (the block kernels of attention_block.go, with k and v
// expanded to the query heads so that every head reads its own rows). The
// compact (o, lse) merges into the rank's running fp32 sums at rows o(h) + i·r;
// the backward reduce-scatters the gathered rows' dk and dv back to their
// owners and scatters every compact gradient back (dk and dv summed over the
// query heads of each kv head, in head order). Every far branch's gather is
// queued before the local branches' kernels, so the transfers overlap them, and
// a rank's own rows (which need no transfer) are its first block.
//
// A far branch needs r | L, r | w' and L | w' for w' = min(w, T) (every rank
// then selects the same rows and its block lies inside one segment), as
// powers of two always give; other configurations are refused, naming them.

// farBranch is one far branch on this rank.
type farBranch struct {
	i        int
	r, lc    int64 // dilation, selected rows per rank and head (L/r)
	segRanks []int // the ranks of this rank's segment, in order
	blk      blockGeom
}

// shardedDil is one rank's view of a sharded dilated attention node.
type shardedDil struct {
	n, rank            int
	b, l, hq, hkv, d   int64
	causal, offBlock   bool
	scale              float64
	offsets            string
	st                 tensor.DType
	localSeg, localDil []int64
	far                []farBranch
	flash              bool // the local branches run on the tensor-core kernels
}

// shardedDilGeometry reads n's branches for the rank being built.
func shardedDilGeometry(g *gen, n *ir.Node) (shardedDil, error) {
	q, k := n.Args[0].Type, n.Args[1].Type
	sd := shardedDil{n: ir.Ranks(n), rank: g.opts.Rank, b: q.Shape[0], l: q.Shape[1], hq: q.Shape[2],
		hkv: k.Shape[2], d: q.Shape[3], causal: n.AttrBool("causal"), scale: ir.AttentionScale(n),
		offsets: n.AttrString("offsets"), st: g.storageOf(n.Args[0])}
	sd.offBlock = sd.offsets == ir.OffsetsBlock
	// Each rank's program is built apart (Options.Rank): the rank decides which
	// ranks its far segments span, so a rank outside the world is refused here.
	if sd.rank < 0 || sd.rank >= sd.n {
		return sd, fmt.Errorf("built for rank %d, but the program has %d ranks", sd.rank, sd.n)
	}
	total := sd.l * int64(sd.n)
	seg, dil := n.AttrInts("segments"), n.AttrInts("dilations")
	for i := range seg {
		w, r := seg[i], dil[i]
		// Segments that tile the rank's block never cross a rank boundary, so they need
		// no communication at all.
		if w < total && sd.l%w == 0 {
			sd.localSeg, sd.localDil = append(sd.localSeg, w), append(sd.localDil, r)
			continue
		}
		// A segment longer than the sequence acts as one segment of the whole sequence.
		wc := min(w, total)
		if sd.l%r != 0 || wc%r != 0 || wc%sd.l != 0 {
			return sd, fmt.Errorf("no GPU lowering for a branch with segment %d and dilation %d on %d ranks "+
				"of %d positions (a far branch needs the dilation to divide the rank's share and the segment, "+
				"and the segment to be whole shares)", w, r, sd.n, sd.l)
		}
		// The far branch's block is plain attention over the compact rows: lc
		// queries a head, and k, v expanded to Hq heads (hq, hq), so that every
		// query head reads its own selected rows.
		fb := farBranch{i: i, r: r, lc: sd.l / r,
			blk: newBlockGeom(sd.b, sd.l/r, sd.hq, sd.hq, sd.d, sd.scale, sd.st)}
		// The first rank of this rank's segment: round the block's start down to a
		// multiple of wc, then convert positions back to ranks.
		first := int64(sd.rank) * sd.l / wc * wc / sd.l
		for s := first; s < first+wc/sd.l; s++ {
			fb.segRanks = append(fb.segRanks, int(s))
		}
		sd.far = append(sd.far, fb)
	}
	var why error
	// The tensor-core kernels take bf16 only; any other storage runs every local
	// branch on the scalar kernels.
	if sd.st != tensor.BF16 {
		why = fmt.Errorf("storage %v: the tensor-core kernels take bf16", sd.st)
	}
	// sd.flash is one choice for every local branch: localForward runs them all
	// on the tensor-core kernels or all on the scalar ones.
	for i := range sd.localSeg {
		if why == nil {
			why = sd.localDesc(i).Check()
		}
	}
	sd.flash = why == nil
	// The far branches' block kernels report their own reasons; the first
	// reason found names the choice.
	for _, fb := range sd.far {
		if why == nil {
			why = fb.blk.why
		}
	}
	// Record the choice and its reason for the compile report, rather than leave
	// a slow fallback to be guessed from timings.
	g.recordChoice(n, why)
	return sd, nil
}

// localDesc is the tensor-core descriptor of local branch i over the rank's block.
func (sd shardedDil) localDesc(i int) flash.Desc {
	// Accumulate: the kernel merges into acc and lse rather than overwriting,
	// which is how branches combine without a merge kernel.
	d := flash.Desc{B: sd.b, T: sd.l, S: sd.l, Hq: int(sd.hq), Hkv: int(sd.hkv), D: int(sd.d), Causal: sd.causal,
		Scale: sd.scale, W: sd.localSeg[i], R: int(sd.localDil[i]), Offsets: sd.offsets, Accumulate: true}
	// A segment covering the whole block with dilation 1 is dense attention over
	// the block; W = T tells the kernel so.
	if d.W >= d.T && d.R == 1 {
		d.W = d.T
	}
	return d.Defaults()
}

// localNode is a stand-in dilated attention node (op) of the local branches
// over the rank's block, for the scalar kernels' header.
func (sd shardedDil) localNode(op ir.Op) *ir.Node {
	// Only the shapes and attributes matter to attnHeader: the dtype is a
	// placeholder.
	qv := &ir.Value{Type: ir.T(tensor.F32, sd.b, sd.l, sd.hq, sd.d)}
	kv := &ir.Value{Type: ir.T(tensor.F32, sd.b, sd.l, sd.hkv, sd.d)}
	return &ir.Node{Op: op, Attrs: ir.A("causal", sd.causal, "scale", sd.scale, "segments", sd.localSeg,
		"dilations", sd.localDil, "offsets", sd.offsets), Args: []*ir.Value{qv, kv, kv}}
}

// farBlock is one block of a far branch: this rank's selected queries against
// segment rank src's selected keys.
type farBlock struct {
	src    int
	causal bool
}

// blocks lists the far branch's visible blocks: this rank's own rows first
// (they need no transfer), then the earlier ranks of the segment in order (all
// of them, without causality).
func (fb farBranch) blocks(rank int, causal bool) []farBlock {
	// Under causality a later rank's keys are all in the future: only earlier
	// ranks contribute, and this rank's own block keeps the causal diagonal.
	out := []farBlock{{rank, causal}}
	for _, s := range fb.segRanks {
		if s != rank && (!causal || s < rank) {
			out = append(out, farBlock{s, false})
		}
	}
	return out
}

// keys are the block's k and v: the rank's own selection (own: when other
// blocks read the gathered rows, so the gather's wait comes before them), or
// the gathered rows of rank src (layout [N, 2, B, lc, Hq, D]).
func (fb farBranch) keys(bl farBlock, own bool, sel, all int) (at, at) {
	n1 := fb.blk.nq()
	// The own selection sits in sel as [2, B, lc, Hq, D]: k at 0, v at n1.
	if own {
		return at{sel, 0}, at{sel, n1}
	}
	return at{all, int64(bl.src) * 2 * n1}, at{all, int64(bl.src)*2*n1 + n1}
}

// gather selects k and v of far branch fb into sel and all-gathers them into all.
func (g *gen) gatherFar(sd shardedDil, n *ir.Node, fb farBranch, k, v int) (sel, all int) {
	n1 := fb.blk.nq()
	// k and v share one buffer so one all_gather moves both.
	sel = g.temp(sd.st, 2, n1)
	// all is [N, 2, B, lc, Hq, D]: rank s's k and v at s·2·n1, in rank order.
	all = g.temp(sd.st, int64(sd.n), 2*n1)
	g.selectRows(sd, fb, at{sel, 0}, at{k, 0}, sd.hkv)
	g.selectRows(sd, fb, at{sel, n1}, at{v, 0}, sd.hkv)
	g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "collective", Node: g.node,
		Op: fmt.Sprintf("%s.gather%d", n.Op, fb.i), Args: []int{sel, all},
		Coll: &Collective{Op: "all_gather", Count: 2 * n1, DType: sd.st.String()}})
	return sel, all
}

// gatherAll queues every far branch's selection and gather, in branch order,
// and returns each branch's (sel, all) buffers.
func (g *gen) gatherAll(sd shardedDil, n *ir.Node, k, v int) [][2]int {
	var out [][2]int
	for _, fb := range sd.far {
		sel, all := g.gatherFar(sd, n, fb, k, v)
		out = append(out, [2]int{sel, all})
	}
	return out
}

// lowerShardedDilated lowers the forward on more than one rank.
func lowerShardedDilated(g *gen, n *ir.Node) error {
	sd, err := shardedDilGeometry(g, n)
	if err != nil {
		return err
	}
	id := func(x *ir.Value) int { return g.ids[x] }
	q, k, v := id(n.Args[0]), id(n.Args[1]), id(n.Args[2])
	lse := id(n.Results[1])
	nq := sd.b * sd.l * sd.hq * sd.d
	// Branches merge into fp32 running sums (acc, lse), written to the output's
	// storage only once at the end, so rounding happens once however many branches.
	acc := g.temp(tensor.F32, nq)
	g.emitFlash(flash.Fill(nq, 0), []int{acc})
	// 0xff800000 is −inf in fp32: the log-sum-exp of no keys yet.
	g.emitFlash(flash.Fill(sd.b*sd.hq*sd.l, 0xff800000), []int{lse})
	// Every far branch's gather first, so that the transfers run while the
	// local branches compute.
	gathered := g.gatherAll(sd, n, k, v)
	if len(sd.localSeg) > 0 {
		if err := g.localForward(sd, acc, lse, q, k, v); err != nil {
			return err
		}
	}
	// Each far branch attends its compact queries to its blocks into compact
	// (oc, lc), then merges them into (acc, lse) at the rows it selected.
	for j, fb := range sd.far {
		sel, all := gathered[j][0], gathered[j][1]
		bg, n1 := fb.blk, fb.blk.nq()
		qc := g.temp(sd.st, n1)
		g.selectRows(sd, fb, at{qc, 0}, at{q, 0}, sd.hq)
		oc, lc := g.temp(tensor.F32, n1), g.temp(tensor.F32, bg.nl())
		g.emitFlash(flash.Fill(n1, 0), []int{oc})
		g.emitFlash(flash.Fill(bg.nl(), 0xff800000), []int{lc})
		blocks := fb.blocks(sd.rank, sd.causal)
		for _, bl := range blocks {
			// A rank alone in its segment reads its own selection; with other blocks
			// to read it reads the gathered copy too, after the gather's wait.
			kk, vv := fb.keys(bl, bl.src == sd.rank && len(blocks) > 1, sel, all)
			if err := g.blockForward(bg, bl.causal, at{oc, 0}, at{lc, 0},
				blockBufs{q: at{qc, 0}, k: kk, v: vv}); err != nil {
				return err
			}
		}
		g.merge(mergeSpec{b: sd.b, tb: fb.lc, tacc: sd.l, hq: sd.hq, d: sd.d, r: fb.r, offsBlock: sd.offBlock,
			ob: tensor.F32}, at{acc, 0}, at{lse, 0}, at{oc, 0}, at{lc, 0})
	}
	// One conversion of the fp32 sums to the output's storage, after every
	// branch: a swap3 of one block is a plain converting copy.
	g.move(swap3{P: 1, Q: 1, R: nq}, at{id(n.Results[0]), 0}, g.storageOf(n.Results[0]), at{acc, 0}, tensor.F32)
	return nil
}

// localForward merges the local branches into (acc, lse).
func (g *gen) localForward(sd shardedDil, acc, lse, q, k, v int) error {
	if sd.flash {
		for i := range sd.localSeg {
			kf, err := flash.Forward(sd.localDesc(i))
			if err != nil {
				return err
			}
			g.emitFlash(kf, []int{acc, lse, q, k, v})
		}
		return nil
	}
	hdr, err := g.attnHeader(sd.localNode(ir.OpDilatedAttention))
	if err != nil {
		return err
	}
	bg := blockGeom{b: sd.b, rows: sd.l, hq: sd.hq, hkv: sd.hkv, d: sd.d, st: sd.st}
	ob, lb := g.temp(sd.st, bg.nq()), g.temp(tensor.F32, bg.nl())
	ct := storageC[sd.st]
	params := []Param{{Name: "o", CType: ct, Out: true}, {Name: "lse", CType: "float", Out: true},
		{Name: "q", CType: ct}, {Name: "k", CType: ct}, {Name: "v", CType: ct}}
	g.emitAt("dilated.fwd", hdr+fmt.Sprintf(attnForward, signature(params)), bg.scalarGrid(sd.hq), params,
		[]at{{ob, 0}, {lb, 0}, {q, 0}, {k, 0}, {v, 0}})
	// The scalar kernels write a separate (o, lse) for all local branches
	// together; it merges into the sums like a far branch with r = 1.
	g.merge(mergeSpec{b: sd.b, tb: sd.l, tacc: sd.l, hq: sd.hq, d: sd.d, r: 1, ob: sd.st},
		at{acc, 0}, at{lse, 0}, at{ob, 0}, at{lb, 0})
	return nil
}

// lowerShardedDilatedGrad lowers the exact backward on more than one rank.
func lowerShardedDilatedGrad(g *gen, n *ir.Node) error {
	sd, err := shardedDilGeometry(g, n)
	if err != nil {
		return err
	}
	id := func(x *ir.Value) int { return g.ids[x] }
	q, k, v, o, lse, do := id(n.Args[0]), id(n.Args[1]), id(n.Args[2]), id(n.Args[3]), id(n.Args[4]),
		id(n.Args[5])
	// The backward reads lse as float (the block kernels' parameter type): a
	// narrower lse would be read as the wrong bits.
	if g.storageOf(n.Args[4]) != tensor.F32 {
		return fmt.Errorf("lse stored as %v, want f32", g.storageOf(n.Args[4]))
	}
	nq, nk := sd.b*sd.l*sd.hq*sd.d, sd.b*sd.l*sd.hkv*sd.d
	whole := newBlockGeom(sd.b, sd.l, sd.hq, sd.hkv, sd.d, sd.scale, sd.st)
	// delta = rowsum(dO ⊙ O) of FlashAttention-2's backward, over the whole
	// merged output, so that every branch's backward is the exact one.
	delta := g.temp(tensor.F32, whole.nl())
	if err := g.blockDelta(whole, at{delta, 0}, at{o, 0}, at{do, 0}); err != nil {
		return err
	}
	// fp32 gradient sums as in the forward: dk and dv share one buffer,
	// [2, B, L, Hkv, D], so that the far scatter adds into both at once.
	dqa, dkva := g.temp(tensor.F32, nq), g.temp(tensor.F32, 2, nk)
	g.emitFlash(flash.Fill(nq, 0), []int{dqa})
	g.emitFlash(flash.Fill(2*nk, 0), []int{dkva})
	x := blockBufs{q: at{q, 0}, k: at{k, 0}, v: at{v, 0}, do: at{do, 0}, lse: at{lse, 0}, delta: at{delta, 0}}
	gathered := g.gatherAll(sd, n, k, v)
	if len(sd.localSeg) > 0 {
		if err := g.localBackward(sd, at{dqa, 0}, at{dkva, 0}, at{dkva, nk}, x); err != nil {
			return err
		}
	}
	for j, fb := range sd.far {
		sel, all := gathered[j][0], gathered[j][1]
		bg, n1 := fb.blk, fb.blk.nq()
		qc, doc := g.temp(sd.st, n1), g.temp(sd.st, n1)
		lc, dc := g.temp(tensor.F32, bg.nl()), g.temp(tensor.F32, bg.nl())
		g.selectRows(sd, fb, at{qc, 0}, at{q, 0}, sd.hq)
		g.selectRows(sd, fb, at{doc, 0}, at{do, 0}, sd.hq)
		g.selectLSE(sd, fb, at{lc, 0}, at{lse, 0})
		g.selectLSE(sd, fb, at{dc, 0}, at{delta, 0})
		dqc, dall := g.temp(tensor.F32, n1), g.temp(tensor.F32, int64(sd.n), 2*n1)
		g.emitFlash(flash.Fill(n1, 0), []int{dqc})
		g.emitFlash(flash.Fill(int64(sd.n)*2*n1, 0), []int{dall})
		blocks := fb.blocks(sd.rank, sd.causal)
		for _, bl := range blocks {
			kk, vv := fb.keys(bl, bl.src == sd.rank && len(blocks) > 1, sel, all)
			xb := blockBufs{q: at{qc, 0}, k: kk, v: vv, do: at{doc, 0}, lse: at{lc, 0}, delta: at{dc, 0}}
			if err := g.blockDQ(bg, bl.causal, at{dqc, 0}, xb); err != nil {
				return err
			}
			off := int64(bl.src) * 2 * n1
			if err := g.blockDKDV(bg, bl.causal, at{dall, off}, at{dall, off + n1}, xb); err != nil {
				return err
			}
		}
		// The gradients of this rank's selected rows, summed over the ranks that
		// read them: a reduce-scatter of dall, which every rank laid out the same.
		mine := g.temp(tensor.F32, 2, n1)
		g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "collective", Node: g.node,
			Op: fmt.Sprintf("%s.scatter%d", n.Op, fb.i), Args: []int{dall, mine},
			Coll: &Collective{Op: "reduce_scatter", Reduce: "sum", Count: 2 * n1, DType: tensor.F32.String()}})
		g.scatterAdd(sd, fb, at{dqa, 0}, at{dqc, 0}, sd.hq)
		g.scatterAdd(sd, fb, at{dkva, 0}, at{mine, 0}, sd.hkv)
		g.scatterAdd(sd, fb, at{dkva, nk}, at{mine, n1}, sd.hkv)
	}
	for i, acc := range []at{{dqa, 0}, {dkva, 0}, {dkva, nk}} {
		y := n.Results[i]
		g.move(swap3{P: 1, Q: 1, R: y.Type.Numel()}, at{id(y), 0}, g.storageOf(y), acc, tensor.F32)
	}
	return nil
}

// localBackward adds the local branches' gradients into the fp32 sums, with
// the global lse and delta (the exact backward).
func (g *gen) localBackward(sd shardedDil, dqa, dka, dva at, x blockBufs) error {
	if sd.flash {
		for i := range sd.localSeg {
			bd := sd.localDesc(i)
			for _, md := range bd.Members() {
				kk, err := flash.DKDV(md)
				if err != nil {
					return err
				}
				g.emitFlashAt(kk, []at{dka, dva, x.q, x.k, x.v, x.do, x.lse, x.delta})
			}
			kq, err := flash.DQ(bd)
			if err != nil {
				return err
			}
			g.emitFlashAt(kq, []at{dqa, x.q, x.k, x.v, x.do, x.lse, x.delta})
		}
		return nil
	}
	hdr, err := g.attnHeader(sd.localNode(ir.OpDilatedAttentionGrad))
	if err != nil {
		return err
	}
	bg := blockGeom{b: sd.b, rows: sd.l, hq: sd.hq, hkv: sd.hkv, d: sd.d, st: sd.st}
	ct := storageC[sd.st]
	dqb, dkb := g.temp(tensor.F32, bg.nq()), g.temp(tensor.F32, 2, bg.nk())
	params := []Param{{Name: "dq", CType: "float", Out: true}, {Name: "q", CType: ct}, {Name: "k", CType: ct},
		{Name: "v", CType: ct}, {Name: "lse", CType: "float"}, {Name: "dout", CType: ct},
		{Name: "delta", CType: "float"}}
	g.emitAt("dilated.dq", hdr+fmt.Sprintf(attnDQ, signature(params)), bg.scalarGrid(sd.hq), params,
		[]at{{dqb, 0}, x.q, x.k, x.v, x.lse, x.do, x.delta})
	g.add(bg.nq(), dqa, at{dqb, 0})
	params = []Param{{Name: "dk", CType: "float", Out: true}, {Name: "dv", CType: "float", Out: true},
		{Name: "q", CType: ct}, {Name: "k", CType: ct}, {Name: "v", CType: ct}, {Name: "lse", CType: "float"},
		{Name: "dout", CType: ct}, {Name: "delta", CType: "float"}}
	g.emitAt("dilated.dkdv", hdr+fmt.Sprintf(attnDKDV, signature(params)), bg.scalarGrid(sd.hkv), params,
		[]at{{dkb, 0}, {dkb, bg.nk()}, x.q, x.k, x.v, x.lse, x.do, x.delta})
	g.add(bg.nk(), dka, at{dkb, 0})
	g.add(bg.nk(), dva, at{dkb, bg.nk()})
	return nil
}

// dilatedHelpers are the index helpers of the select and scatter kernels.
// The macros the select and scatter kernels expect: DL_L the rank's rows,
// DL_LC the selected rows per head, DL_HQ, DL_D, DL_R the dilation, and
// DL_OFF(h) head h's offset, from lcc_head_offset (attention.go's header).
func dilatedHelpers(sd shardedDil, fb farBranch) string {
	return fmt.Sprintf("#define DL_L %dLL\n#define DL_LC %dLL\n#define DL_HQ %d\n#define DL_D %d\n#define DL_R %d\n"+
		"#define DL_OFF(h) lcc_head_offset((h), DL_HQ, DL_R, %d)\n", sd.l, fb.lc, sd.hq, sd.d, fb.r, b2i(sd.offBlock))
}

// selectRows writes y [B, lc, Hq, D] = x [B, L, hx, D] at rows o(h) + i·r of
// kv head h·hx/Hq: the rows far branch fb selects, one per query head.
func (g *gen) selectRows(sd shardedDil, fb farBranch, y, x at, hx int64) {
	n := sd.b * fb.lc * sd.hq * sd.d
	it := idxType(sd.b * sd.l * max(sd.hq, hx) * sd.d)
	ct := storageC[sd.st]
	params := []Param{{Name: "y", CType: ct, Out: true}, {Name: "x", CType: ct}}
	body := dilatedHelpers(sd, fb) + fmt.Sprintf(`extern "C" __global__ void __launch_bounds__(256) @KERNEL@(%s) {
%s    const %[3]s d = i %% DL_D, t = i / DL_D, h = t %% DL_HQ, t2 = t / DL_HQ, j = t2 %% DL_LC, b = t2 / DL_LC;
    const %[3]s p = DL_OFF((int)h) + j * DL_R;
    y[i] = x[((b * DL_L + p) * %[4]d + h / %[5]d) * DL_D + d];
  }
}
`, signature(params), gridStride(it, n), it, hx, sd.hq/hx)
	grid, block := flatGrid(n)
	g.emit(kernelSpec{op: "dilated.select", body: body, grid: grid, block: block, params: params,
		args: []int{y.id, x.id}, offs: []int64{y.off, x.off}})
}

// selectLSE writes y [B, Hq, lc] = x [B, Hq, L] at rows o(h) + i·r (fp32).
func (g *gen) selectLSE(sd shardedDil, fb farBranch, y, x at) {
	n := sd.b * sd.hq * fb.lc
	it := idxType(sd.b * sd.hq * sd.l)
	params := []Param{{Name: "y", CType: "float", Out: true}, {Name: "x", CType: "float"}}
	body := dilatedHelpers(sd, fb) + fmt.Sprintf(`extern "C" __global__ void __launch_bounds__(256) @KERNEL@(%s) {
%s    const %[3]s j = i %% DL_LC, bh = i / DL_LC, h = bh %% DL_HQ;
    y[i] = x[bh * DL_L + DL_OFF((int)h) + j * DL_R];
  }
}
`, signature(params), gridStride(it, n), it)
	grid, block := flatGrid(n)
	g.emit(kernelSpec{op: "dilated.select", body: body, grid: grid, block: block, params: params,
		args: []int{y.id, x.id}, offs: []int64{y.off, x.off}})
}

// scatterAdd adds the compact fp32 gradient y [B, lc, Hq, D] into the fp32 sum
// x [B, L, hx, D]: row p of head hx gets, in query-head order, the rows of the
// query heads of its group that select p.
func (g *gen) scatterAdd(sd shardedDil, fb farBranch, x, y at, hx int64) {
	n := sd.b * sd.l * hx * sd.d
	it := idxType(sd.b * sd.l * max(sd.hq, hx) * sd.d)
	params := []Param{{Name: "x", CType: "float", Out: true}, {Name: "y", CType: "float"}}
	var loop strings.Builder
	fmt.Fprintf(&loop, "    for (int m = 0; m < %d; ++m) {\n", sd.hq/hx)
	fmt.Fprintf(&loop, "      const int h = (int)hx * %d + m;\n", sd.hq/hx)
	loop.WriteString("      const long long o = DL_OFF(h);\n")
	loop.WriteString("      if (p >= o && (p - o) % DL_R == 0) s += y[((b * DL_LC + (p - o) / DL_R) * DL_HQ + h) * DL_D + d];\n")
	loop.WriteString("    }\n")
	body := dilatedHelpers(sd, fb) + fmt.Sprintf(`extern "C" __global__ void __launch_bounds__(256) @KERNEL@(%s) {
%s    const %[3]s d = i %% DL_D, t = i / DL_D, hx = t %% %[4]d, t2 = t / %[4]d, p = t2 %% DL_L, b = t2 / DL_L;
    float s = 0.0f;
%[5]s    x[i] += s;
  }
}
`, signature(params), gridStride(it, n), it, hx, loop.String())
	grid, block := flatGrid(n)
	g.emit(kernelSpec{op: "dilated.scatter", body: body, grid: grid, block: block, params: params,
		args: []int{x.id, y.id}, offs: []int64{x.off, y.off}})
}
