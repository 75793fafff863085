package cuda

import (
	"fmt"
	"strings"

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
// the tensor-core kernels (codegen/cuda/flash, bf16, head dim a multiple of 8 up to 128) with
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
	n, rank   int
	b, l, hkv int64
	nc, c     int64
	chunks    [][][2]int64 // per rank: the global (start, length) of its chunks
	causal    bool
	blk       blockGeom // B × c queries against c keys
}

// ringGeometry reads n's sizes for the rank being built.
func ringGeometry(g *gen, n *ir.Node) (ringGeom, error) {
	q, k := n.Args[0].Type, n.Args[1].Type
	rg := ringGeom{n: ir.Ranks(n), rank: g.opts.Rank, b: q.Shape[0], l: q.Shape[1], hkv: k.Shape[2],
		causal: n.AttrBool("causal")}
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
	rg.blk = newBlockGeom(rg.b, rg.c, q.Shape[2], rg.hkv, q.Shape[3], ir.AttentionScale(n),
		g.storageOf(n.Args[0]))
	g.recordChoice(n, rg.blk.why)
	return rg, nil
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

// nk is the elements of all of this rank's k (or v).
func (rg ringGeom) nk() int64 { return rg.b * rg.l * rg.hkv * rg.blk.d }

// operands are the block's operands in the chunk-major buffers: q, do, lse and
// delta at query chunk qi, k and v at key chunk kj of the travelling kv.
func (rg ringGeom) operands(bl ringBlock, q, kv, do, lse, delta int) blockBufs {
	bg := rg.blk
	qo, ko, lo := bl.qi*bg.nq(), bl.kj*bg.nk(), bl.qi*bg.nl()
	return blockBufs{q: at{q, qo}, k: at{kv, ko}, v: at{kv, rg.nk() + ko}, do: at{do, qo},
		lse: at{lse, lo}, delta: at{delta, lo}}
}

// ringTransfer queues one ring step: count elements of dt from buffer in to
// rank+1, and rank−1's into out.
func (g *gen) ringTransfer(n *ir.Node, what string, in, out int, count int64, dt tensor.DType) {
	g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "collective", Node: g.node,
		Op: n.Op.String() + "." + what, Args: []int{in, out},
		Coll: &Collective{Op: "send_recv", Count: count, DType: dt.String(), Shift: 1}})
}

// toChunks returns x [outer, nc·c, inner] as a chunk-major [nc, outer, c,
// inner] buffer: x itself when that is already its layout.
func (g *gen) toChunks(rg ringGeom, x int, dt tensor.DType, outer, inner int64) int {
	if outer == 1 || rg.nc == 1 {
		return x
	}
	t := g.temp(dt, rg.nc, outer, rg.c*inner)
	g.move(swap3{P: outer, Q: rg.nc, R: rg.c * inner}, at{t, 0}, dt, at{x, 0}, dt)
	return t
}

// fromChunks writes the chunk-major fp32 accumulator acc into y [outer, nc·c,
// inner] in y's storage dtype.
func (g *gen) fromChunks(rg ringGeom, y *ir.Value, acc at, outer, inner int64) {
	g.move(swap3{P: rg.nc, Q: outer, R: rg.c * inner}, at{g.ids[y], 0}, g.storageOf(y), acc, tensor.F32)
}

// packKV copies k and v [B, L, Hkv, D] into the travelling buffer kv
// [2, nc, B, c, Hkv, D].
func (g *gen) packKV(rg ringGeom, kv, k, v int) {
	s := swap3{P: rg.b, Q: rg.nc, R: rg.c * rg.hkv * rg.blk.d}
	g.move(s, at{kv, 0}, rg.blk.st, at{k, 0}, rg.blk.st)
	g.move(s, at{kv, rg.nk()}, rg.blk.st, at{v, 0}, rg.blk.st)
}

// lowerRingAttention lowers ring attention on more than one rank.
func lowerRingAttention(g *gen, n *ir.Node) error {
	if err := refuseRingDocs(n); err != nil {
		return err
	}
	rg, err := ringGeometry(g, n)
	if err != nil {
		return err
	}
	bg, nk := rg.blk, rg.nk()
	id := func(x *ir.Value) int { return g.ids[x] }
	qc := g.toChunks(rg, id(n.Args[0]), bg.st, rg.b, bg.hq*bg.d)
	kv := [2]int{g.temp(bg.st, 2, nk), g.temp(bg.st, 2, nk)}
	g.packKV(rg, kv[0], id(n.Args[1]), id(n.Args[2]))
	acc := g.temp(tensor.F32, rg.nc, bg.nq())
	lacc := g.temp(tensor.F32, rg.nc, bg.nl())
	g.emitFlash(flash.Fill(rg.nc*bg.nq(), 0), []int{acc})
	g.emitFlash(flash.Fill(rg.nc*bg.nl(), 0xff800000), []int{lacc})
	for s := range rg.n {
		cur := kv[s%2]
		if s < rg.n-1 {
			g.ringTransfer(n, "kv", cur, kv[(s+1)%2], 2*nk, bg.st)
		}
		for _, bl := range rg.blocks(s) {
			x := rg.operands(bl, qc, cur, -1, -1, -1)
			if err := g.blockForward(bg, bl.causal, at{acc, bl.qi * bg.nq()}, at{lacc, bl.qi * bg.nl()},
				x); err != nil {
				return err
			}
		}
	}
	g.fromChunks(rg, n.Results[0], at{acc, 0}, rg.b, bg.hq*bg.d)
	g.fromChunks(rg, n.Results[1], at{lacc, 0}, rg.b*bg.hq, 1)
	return nil
}

// lowerRingAttentionGrad lowers the backward: dq at home, dk and dv riding the
// ring with k and v.
func lowerRingAttentionGrad(g *gen, n *ir.Node) error {
	if err := refuseRingDocs(n); err != nil {
		return err
	}
	rg, err := ringGeometry(g, n)
	if err != nil {
		return err
	}
	bg, nk := rg.blk, rg.nk()
	id := func(x *ir.Value) int { return g.ids[x] }
	q, o, lse, do := n.Args[0], n.Args[3], n.Args[4], n.Args[5]
	if g.storageOf(lse) != tensor.F32 {
		return fmt.Errorf("lse stored as %v, want f32", g.storageOf(lse))
	}
	delta := g.temp(tensor.F32, rg.b, bg.hq, rg.l)
	whole := bg
	whole.rows = rg.l
	if err := g.blockDelta(whole, at{delta, 0}, at{id(o), 0}, at{id(do), 0}); err != nil {
		return err
	}
	qc := g.toChunks(rg, id(q), bg.st, rg.b, bg.hq*bg.d)
	doc := g.toChunks(rg, id(do), bg.st, rg.b, bg.hq*bg.d)
	lc := g.toChunks(rg, id(lse), tensor.F32, rg.b*bg.hq, 1)
	dc := g.toChunks(rg, delta, tensor.F32, rg.b*bg.hq, 1)
	kv := [2]int{g.temp(bg.st, 2, nk), g.temp(bg.st, 2, nk)}
	dkv := [2]int{g.temp(tensor.F32, 2, nk), g.temp(tensor.F32, 2, nk)}
	g.packKV(rg, kv[0], id(n.Args[1]), id(n.Args[2]))
	dqa := g.temp(tensor.F32, rg.nc, bg.nq())
	g.emitFlash(flash.Fill(rg.nc*bg.nq(), 0), []int{dqa})
	g.emitFlash(flash.Fill(2*nk, 0), []int{dkv[0]})
	for s := range rg.n {
		cur, dcur := kv[s%2], dkv[s%2]
		if s < rg.n-1 {
			g.ringTransfer(n, "kv", cur, kv[(s+1)%2], 2*nk, bg.st)
		}
		// dQ first: the previous step's dk, dv are still on their way here.
		for _, bl := range rg.blocks(s) {
			if err := g.blockDQ(bg, bl.causal, at{dqa, bl.qi * bg.nq()},
				rg.operands(bl, qc, cur, doc, lc, dc)); err != nil {
				return err
			}
		}
		for _, bl := range rg.blocks(s) {
			ko := bl.kj * bg.nk()
			if err := g.blockDKDV(bg, bl.causal, at{dcur, ko}, at{dcur, nk + ko},
				rg.operands(bl, qc, cur, doc, lc, dc)); err != nil {
				return err
			}
		}
		g.ringTransfer(n, "dkv", dcur, dkv[(s+1)%2], 2*nk, tensor.F32)
	}
	home := dkv[rg.n%2]
	g.fromChunks(rg, n.Results[0], at{dqa, 0}, rg.b, bg.hq*bg.d)
	g.fromChunks(rg, n.Results[1], at{home, 0}, rg.b, rg.hkv*bg.d)
	g.fromChunks(rg, n.Results[2], at{home, nk}, rg.b, rg.hkv*bg.d)
	return nil
}

// move copies buffer src (from element srcOff, dtype dx) viewed as [P, Q, R]
// into dst (from element dstOff, dtype dy) as [Q, P, R], converting through
// fp32 when the dtypes differ (P or Q = 1 is a plain copy).
func (g *gen) move(s swap3, dst at, dy tensor.DType, src at, dx tensor.DType) {
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
		args:   []int{dst.id, src.id}, offs: []int64{dst.off, src.off}})
}

// add adds n fp32 elements of src into dst.
func (g *gen) add(n int64, dst, src at) {
	params := []Param{{Name: "y", CType: "float", Out: true}, {Name: "x", CType: "float"}}
	body := fmt.Sprintf("// add f32[%d]\nextern \"C\" __global__ void __launch_bounds__(256) @KERNEL@(%s) {\n",
		n, signature(params)) + gridStride(idxType(n), n) + "    y[i] += x[i];\n  }\n}\n"
	grid, block := flatGrid(n)
	g.emit(kernelSpec{op: "ring.add", body: body, grid: grid, block: block, params: params,
		args: []int{dst.id, src.id}, offs: []int64{dst.off, src.off}})
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
func (g *gen) merge(m mergeSpec, acc, lacc, ob, lb at) {
	params := []Param{{Name: "acc", CType: "float", Out: true}, {Name: "lacc", CType: "float", Out: true},
		{Name: "ob", CType: storageC[m.ob]}, {Name: "lb", CType: "float"}}
	rows := m.b * m.hq * m.tb
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "// merge: B=%d, %d block rows into %d, Hq=%d, D=%d, r=%d\n", m.b, m.tb, m.tacc, m.hq, m.d, m.r)
	for _, d := range []struct {
		name string
		v    int64
	}{{"MG_ROWS", rows}, {"MG_TB", m.tb}, {"MG_TACC", m.tacc}, {"MG_HQ", m.hq}, {"MG_D", m.d}, {"MG_R", m.r},
		{"MG_BASE", m.base}, {"MG_OFFBLOCK", int64(b2i(m.offsBlock))}} {
		fmt.Fprintf(&hdr, "#define %s %dLL\n", d.name, d.v)
	}
	fmt.Fprintf(&hdr, "typedef %s MG_OT;\n", storageC[m.ob])
	g.emit(kernelSpec{op: "ring.merge", body: hdr.String() + mergeSrc,
		grid: [3]uint32{uint32((rows + 255) / 256), 1, 1}, block: [3]uint32{256, 1, 1}, params: params,
		args: []int{acc.id, lacc.id, ob.id, lb.id}, offs: []int64{acc.off, lacc.off, ob.off, lb.off}})
}

// mergeSrc is the merge kernel after its MG_ definitions: one thread per block
// row (b, h, i), accumulator row p = base + o(h) + i·r.
const mergeSrc = `extern "C" __global__ void __launch_bounds__(256) @KERNEL@(float* acc, float* lacc,
    const MG_OT* ob, const float* lb) {
  const long long row = (long long)blockIdx.x * 256 + threadIdx.x;
  if (row >= MG_ROWS) return;
  const long long i = row % MG_TB, bh = row / MG_TB;
  const int h = (int)(bh % MG_HQ);
  const long long b = bh / MG_HQ;
  const long long p = MG_BASE + (MG_R > 1 ? lcc_head_offset(h, (int)MG_HQ, (int)MG_R, MG_OFFBLOCK) : 0) + i * MG_R;
  const float l2 = lb[bh * MG_TB + i];
  if (l2 == -LCC_INF) return;
  float* la = lacc + (b * MG_HQ + h) * MG_TACC + p;
  float* o = acc + ((b * MG_TACC + p) * MG_HQ + h) * MG_D;
  const MG_OT* x = ob + ((b * MG_TB + i) * MG_HQ + h) * MG_D;
  const float l1 = *la;
  if (l1 == -LCC_INF) {
    for (int d = 0; d < MG_D; ++d) o[d] = lcc_tof(x[d]);
    *la = l2;
    return;
  }
  const float w = 1.0f / (1.0f + expf(l1 - l2));
  for (int d = 0; d < MG_D; ++d) o[d] -= w * (o[d] - lcc_tof(x[d]));
  *la = fmaxf(l1, l2) + log1pf(expf(-fabsf(l1 - l2)));
}
`

// refuseRingDocs is the error of ring attention over packed documents: the ring
// blocks' tier-1 kernels (the split backward) have no document mask.
func refuseRingDocs(n *ir.Node) error {
	if ir.HasDocs(n) {
		return fmt.Errorf("%s: ring attention over packed documents (--doc-sep) has no GPU kernel: "+
			"the ring blocks' kernels have no document mask; train with --device=cpu", n.Where())
	}
	return nil
}
