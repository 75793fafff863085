package interp

import (
	"fmt"
	"slices"

	"github.com/lcc-dev/lcc/collective"

	"github.com/lcc-dev/lcc/interp/attention"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Kernels of the sequence-parallel attention ops (ir/ops_collective.go). Each
// rank computes blocks with package attention's DenseAt / DenseAtBackward at the
// blocks' global positions, so the causal pattern and the merge are those of the
// unsharded op; only the summation order differs, by rounding.

// Ring attention is Liu, Zaharia and Abbeel, "Ring Attention with Blockwise
// Transformers for Near-Infinite Context" (2023); sharded dilated attention is
// LongNet's distributed algorithm (Ding et al., 2023, §3.1). Every
// SendRecv, AllGather and AllToAll is labelled with the node and the step, so
// that a rank that waits on the wrong collective is named in the error.
func init() {
	Register(ir.OpRingAttention, kernelRingAttention)
	Register(ir.OpRingAttentionGrad, kernelRingAttentionGrad)
	Register(ir.OpShardedDilatedAttention, kernelShardedDilated)
	Register(ir.OpShardedDilatedAttentionGrad, kernelShardedDilatedGrad)
}

// rows copies rows [off, off+n) of the T axis of a [B, T, H, D] tensor.
func rows(x []float64, B, T, H, D, off, n int) []float64 {
	// Batch b's rows [off, off+n) are contiguous (T is outside H and D), so each
	// batch is one slice append.
	out := make([]float64, 0, B*n*H*D)
	for b := range B {
		base := (b*T + off) * H * D
		out = append(out, x[base:base+n*H*D]...)
	}
	return out
}

// putRows writes (or adds) src [B, n, H, D] into rows [off, off+n) of dst [B, T, H, D].
func putRows(dst, src []float64, B, T, H, D, off, n int, add bool) {
	for b := range B {
		d := dst[(b*T+off)*H*D : (b*T+off+n)*H*D]
		s := src[b*n*H*D : (b+1)*n*H*D]
		if add {
			for i, v := range s {
				d[i] += v
			}
		} else {
			copy(d, s)
		}
	}
}

// lseRows copies positions [off, off+n) of an lse [B, H, T].
func lseRows(x []float64, B, H, T, off, n int) []float64 {
	out := make([]float64, 0, B*H*n)
	for bh := range B * H {
		out = append(out, x[bh*T+off:bh*T+off+n]...)
	}
	return out
}

// putLSERows is the inverse of lseRows: it writes n rows per (batch, head) of
// src back at row off of each [T] run of dst.
func putLSERows(dst, src []float64, B, H, T, off, n int) {
	for bh := range B * H {
		copy(dst[bh*T+off:bh*T+off+n], src[bh*n:(bh+1)*n])
	}
}

// startRows copies positions [off, off+n) of doc starts [B, T].
func startRows(starts []int64, B, T, off, n int) []int64 {
	if starts == nil {
		return nil
	}
	out := make([]int64, 0, B*n)
	for b := range B {
		out = append(out, starts[b*T+off:b*T+off+n]...)
	}
	return out
}

// docStarts is the doc-starts operand of n's kernel arguments, or nil without one.
func docStarts(n *ir.Node, args []*tensor.Tensor) []int64 {
	if !ir.HasDocs(n) {
		return nil
	}
	return args[len(args)-1].I
}

// localChunk is one chunk of a rank's sequence block: global start, local offset,
// length.
// start is where the chunk sits in the whole sequence (what the causal mask
// and the document mask compare), off where it sits in this rank's block.
type localChunk struct{ start, off, n int }

// rankChunks lists the chunks of the sequence this rank holds under layout
// (contiguous: one; zigzag: chunks r and 2N-1-r), from ir.LayoutChunks, the
// one definition of the layouts that the passes and the GPU share.
func rankChunks(layout string, total, ranks, rank int) []localChunk {
	var out []localChunk
	off := 0
	for _, c := range ir.LayoutChunks(layout, int64(total), int64(ranks), int64(rank)) {
		out = append(out, localChunk{int(c[0]), off, int(c[1])})
		off += int(c[1])
	}
	return out
}

// visible reports whether a causal block of queries qc sees any key of kc.
func visible(qc, kc localChunk, causal bool) bool {
	// The last query of qc is at qc.start+qc.n−1; it sees the key chunk when the
	// chunk's first key is not after it. Under a causal mask about half the
	// blocks are skipped so; the zigzag layout spreads the rest evenly over ranks.
	return !causal || kc.start <= qc.start+qc.n-1
}

// ringSetup reads a ring attention node's sizes and communicator.
func ringSetup(n *ir.Node, args []*tensor.Tensor, opts Options) (collective.Communicator, attention.Dims,
	[][]localChunk, float64, bool, error) {
	c, err := commFor(n, opts)
	if err != nil {
		return nil, attention.Dims{}, nil, 0, false, err
	}
	d := attnDims(args[0], args[1])
	layout := n.AttrString("layout")
	// Each rank holds d.T positions of the sequence: the global length is N·T.
	total := d.T * c.Size()
	// Refuses a length the layout cannot split (zigzag needs 2N equal chunks)
	// before any rank sends, so that all ranks fail alike.
	if _, err := ir.LayoutLocal(layout, int64(total), int64(c.Size())); err != nil {
		return nil, d, nil, 0, false, err
	}
	chunks := make([][]localChunk, c.Size())
	for r := range chunks {
		chunks[r] = rankChunks(layout, total, c.Size(), r)
	}
	return c, d, chunks, ir.AttentionScale(n), n.AttrBool("causal"), nil
}

// kernelRingAttention runs the N-step ring: at step s this rank holds the k, v of
// rank r−s, attends its query chunks to that rank's key chunks, merges, and passes
// k, v on to rank r+1.
func kernelRingAttention(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	c, d, chunks, scale, causal, err := ringSetup(n, args, opts)
	if err != nil {
		return nil, err
	}
	q, k, v := args[0].F, args[1].F, args[2].F
	N, me := c.Size(), c.Rank()
	mine := chunks[me]
	starts := docStarts(n, args)
	// Per query chunk: the running (o, lse), merged block by block.
	accO := make([][]float64, len(mine))
	accL := make([][]float64, len(mine))
	qs := make([][]float64, len(mine))
	qStarts := make([][]int64, len(mine))
	for i, qc := range mine {
		accO[i] = make([]float64, d.B*qc.n*d.Hq*d.D)
		// lse −Inf is the merge's identity: a block merged into it replaces it.
		accL[i] = slices.Repeat([]float64{negInf}, d.B*d.Hq*qc.n)
		qs[i] = rows(q, d.B, d.T, d.Hq, d.D, qc.off, qc.n)
		qStarts[i] = startRows(starts, d.B, d.T, qc.off, qc.n)
	}
	// k and v travel as one buffer, one SendRecv per step. A clone: the
	// argument k is read-only (package doc).
	kv := append(slices.Clone(k), v...)
	nk := len(k)
	for step := range N {
		// At step s the buffer came s hops around the ring: it is rank me−s's k, v.
		src := (me - step + N) % N
		for i, qc := range mine {
			for _, kc := range chunks[src] {
				if !visible(qc, kc, causal) {
					continue
				}
				ks := rows(kv[:nk], d.B, d.T, d.Hkv, d.D, kc.off, kc.n)
				vs := rows(kv[nk:], d.B, d.T, d.Hkv, d.D, kc.off, kc.n)
				bd := attention.Dims{B: d.B, T: qc.n, S: kc.n, Hq: d.Hq, Hkv: d.Hkv, D: d.D}
				var ob, lb []float64
				if starts != nil { // the document mask needs only global positions
					ob, lb = attention.DenseDocs(qs[i], ks, vs, bd, qStarts[i], qc.start, kc.start, scale,
						attention.Rounding{})
				} else {
					ob, lb = attention.DenseAt(qs[i], ks, vs, bd, qc.start, kc.start, causal, scale)
				}
				// The online-softmax merge of (o, lse) pairs: any order of blocks gives the
				// same result up to rounding, so ranks may visit them as the ring brings them.
				attention.MergeInto(accO[i], accL[i], ob, lb, bd)
			}
		}
		// After the last step the buffer would only return to its owner: no send.
		if step < N-1 {
			kv, err = c.SendRecv(fmt.Sprintf("%s: ring step %d", opName(n), step), kv, (me+1)%N,
				(me-1+N)%N)
			if err != nil {
				return nil, err
			}
			if len(kv) != 2*nk {
				return nil, fmt.Errorf("ring step %d: rank %d sent %d k/v elements, rank %d expects %d",
					step, (me-1+N)%N, len(kv), me, 2*nk)
			}
		}
	}
	// Scatter the chunks back into the rank's [B, T, Hq, D] block and its lse.
	o := make([]float64, len(q))
	lse := make([]float64, d.B*d.Hq*d.T)
	for i, qc := range mine {
		putRows(o, accO[i], d.B, d.T, d.Hq, d.D, qc.off, qc.n, false)
		putLSERows(lse, accL[i], d.B, d.Hq, d.T, qc.off, qc.n)
	}
	return []*tensor.Tensor{floatsResult(n, 0, o), floatsResult(n, 1, lse)}, nil
}

// kernelRingAttentionGrad runs the ring again with the merged o and lse: every
// block's backward is then exact, dq accumulates at home, and dk, dv travel with
// k, v; after the N-th step they are back at their owner.
func kernelRingAttentionGrad(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	c, d, chunks, scale, causal, err := ringSetup(n, args, opts)
	if err != nil {
		return nil, err
	}
	q, o, lse, do := args[0].F, args[3].F, args[4].F, args[5].F
	N, me := c.Size(), c.Rank()
	mine := chunks[me]
	nk := len(args[1].F)
	// The travelling buffer: k, v, dk, dv.
	// The gradients dk, dv of a key block accumulate in the buffer that carries
	// it: each rank adds what its queries contribute, and after N sends the sum
	// is back at the owner, with no reduction step.
	buf := slices.Concat(args[1].F, args[2].F, make([]float64, 2*nk))
	dq := make([]float64, len(q))
	starts := docStarts(n, args)
	type qblock struct {
		q, o, do, lse []float64
		starts        []int64
	}
	qb := make([]qblock, len(mine))
	// Each query chunk's operands are cut out once, not once per step.
	for i, qc := range mine {
		qb[i] = qblock{rows(q, d.B, d.T, d.Hq, d.D, qc.off, qc.n), rows(o, d.B, d.T, d.Hq, d.D, qc.off, qc.n),
			rows(do, d.B, d.T, d.Hq, d.D, qc.off, qc.n), lseRows(lse, d.B, d.Hq, d.T, qc.off, qc.n),
			startRows(starts, d.B, d.T, qc.off, qc.n)}
	}
	for step := range N {
		// As in the forward: the buffer now holds rank me−step's k, v and the
		// partial dk, dv of the ranks it has visited.
		src := (me - step + N) % N
		k, v, dk, dv := buf[:nk], buf[nk:2*nk], buf[2*nk:3*nk], buf[3*nk:]
		for i, qc := range mine {
			for _, kc := range chunks[src] {
				if !visible(qc, kc, causal) {
					continue
				}
				ks := rows(k, d.B, d.T, d.Hkv, d.D, kc.off, kc.n)
				vs := rows(v, d.B, d.T, d.Hkv, d.D, kc.off, kc.n)
				bd := attention.Dims{B: d.B, T: qc.n, S: kc.n, Hq: d.Hq, Hkv: d.Hkv, D: d.D}
				var gq, gk, gv []float64
				if starts != nil {
					gq, gk, gv = attention.DenseDocsBackward(qb[i].q, ks, vs, qb[i].o, qb[i].lse, qb[i].do,
						bd, qb[i].starts, qc.start, kc.start, scale, attention.Rounding{})
				} else {
					gq, gk, gv = attention.DenseAtBackward(qb[i].q, ks, vs, qb[i].o, qb[i].lse, qb[i].do,
						bd, qc.start, kc.start, causal, scale)
				}
				// dq stays home; dk and dv add into the travelling buffer.
				putRows(dq, gq, d.B, d.T, d.Hq, d.D, qc.off, qc.n, true)
				putRows(dk, gk, d.B, d.T, d.Hkv, d.D, kc.off, kc.n, true)
				putRows(dv, gv, d.B, d.T, d.Hkv, d.D, kc.off, kc.n, true)
			}
		}
		send := buf
		if step == N-1 {
			send = buf[2*nk:] // the last step only brings dk, dv home
		}
		got, err := c.SendRecv(fmt.Sprintf("%s: ring step %d", opName(n), step), send, (me+1)%N,
			(me-1+N)%N)
		if err != nil {
			return nil, err
		}
		if len(got) != len(send) {
			return nil, fmt.Errorf("ring step %d: rank %d sent %d elements, rank %d expects %d",
				step, (me-1+N)%N, len(got), me, len(send))
		}
		// The last step brought dk, dv home: the k, v half of the buffer is stale
		// and was not sent, so only the gradient half is overwritten.
		if step == N-1 {
			copy(buf[2*nk:], got)
		} else {
			buf = got
		}
	}
	dk := slices.Clone(buf[2*nk : 3*nk])
	dv := slices.Clone(buf[3*nk:])
	return []*tensor.Tensor{floatsResult(n, 0, dq), floatsResult(n, 1, dk), floatsResult(n, 2, dv)}, nil
}

// shardedDilated is the state of one sharded dilated attention call on one rank.
type shardedDilated struct {
	c      collective.Communicator
	d      attention.Dims // local sizes: d.T = L
	cfg    attention.DilatedConfig
	scale  float64
	total  int // T = N·L
	lo, hi int // this rank's global positions [lo, hi)
	name   string
}

// newShardedDilated reads node n's configuration and this rank's share of the
// sequence; branches whose segment fits one rank run locally, the others
// gather their selected k/v rows from every rank (LongNet §3.1).
func newShardedDilated(n *ir.Node, args []*tensor.Tensor, opts Options) (*shardedDilated, error) {
	c, err := commFor(n, opts)
	if err != nil {
		return nil, err
	}
	d := attnDims(args[0], args[1])
	cfg, err := dilatedConfig(n, d)
	if err != nil {
		return nil, err
	}
	return &shardedDilated{c: c, d: d, cfg: cfg, scale: ir.AttentionScale(n), total: d.T * c.Size(),
		lo: c.Rank() * d.T, hi: (c.Rank() + 1) * d.T, name: opName(n)}, nil
}

// local reports whether branch br's segments tile every rank's block, so that the
// branch needs no communication.
func (s *shardedDilated) local(br attention.Branch) bool {
	// A segment that divides the rank's block lies wholly inside one rank, so
	// every rank runs the branch on its own block.
	return br.Segment < s.total && s.d.T%br.Segment == 0
}

// residues lists, per kv head, the offsets its query heads use in branch br.
func (s *shardedDilated) residues(br attention.Branch) [][]int {
	// Grouped-query attention: query head h reads kv head h/g, and the heads of a
	// group may use different offsets, so a kv head sends the rows of each.
	g := s.d.Hq / s.d.Hkv
	out := make([][]int, s.d.Hkv)
	for h := range s.d.Hq {
		o := s.cfg.Offsets.Offset(h, s.d.Hq, br.Dilation)
		if !slices.Contains(out[h/g], o) {
			out[h/g] = append(out[h/g], o)
		}
	}
	return out
}

// selected lists the global positions in [lo, hi) that residue o selects in br.
func selected(lo, hi int, br attention.Branch, o int) []int {
	var out []int
	for p := lo; p < hi; p++ {
		// LongNet's sparsification: within each segment, every r-th position from
		// offset o.
		if (p%br.Segment)%br.Dilation == o {
			out = append(out, p)
		}
	}
	return out
}

// gathered is the all-gathered sparse k/v of one branch: for batch b, kv head hk
// and residue o, the selected positions of the whole sequence in order, with their
// k and v rows (D each) and the matching dk, dv accumulators.
type gathered struct {
	pos        map[[3]int][]int
	k, v       map[[3]int][]float64
	dk, dv     map[[3]int][]float64
	res        [][]int
	rankCounts map[[3]int][]int // rows each rank contributed
}

// gather sparsifies this rank's k and v for branch br and all-gathers them.
func (s *shardedDilated) gather(k, v []float64, br attention.Branch, bi int) (*gathered, error) {
	d := s.d
	res := s.residues(br)
	// The payload's order, (batch, kv head, residue, position) with k then v per
	// row, is what the receivers below walk again for every rank's part; the
	// two loops must stay in step.
	var payload []float64
	for b := range d.B {
		for hk := range d.Hkv {
			for _, o := range res[hk] {
				for _, p := range selected(s.lo, s.hi, br, o) {
					r := ((b*d.T+p-s.lo)*d.Hkv + hk) * d.D
					payload = append(payload, k[r:r+d.D]...)
					payload = append(payload, v[r:r+d.D]...)
				}
			}
		}
	}
	parts, err := s.c.AllGather(fmt.Sprintf("%s: all_gather of branch %d", s.name, bi), nil, payload)
	if err != nil {
		return nil, err
	}
	g := &gathered{pos: map[[3]int][]int{}, k: map[[3]int][]float64{}, v: map[[3]int][]float64{},
		dk: map[[3]int][]float64{}, dv: map[[3]int][]float64{}, res: res, rankCounts: map[[3]int][]int{}}
	for src, part := range parts {
		at := 0
		for b := range d.B {
			for hk := range d.Hkv {
				for _, o := range res[hk] {
					key := [3]int{b, hk, o}
					ps := selected(src*d.T, (src+1)*d.T, br, o)
					// A short part is a rank that disagrees on the layout or the config: an
					// error, never an index panic.
					if at+2*d.D*len(ps) > len(part) {
						return nil, fmt.Errorf("%s: branch %d: rank %d sent %d values, fewer than its "+
							"selected rows need", s.name, bi, src, len(part))
					}
					for range ps {
						g.k[key] = append(g.k[key], part[at:at+d.D]...)
						g.v[key] = append(g.v[key], part[at+d.D:at+2*d.D]...)
						at += 2 * d.D
					}
					g.pos[key] = append(g.pos[key], ps...)
					g.rankCounts[key] = append(g.rankCounts[key], len(ps))
				}
			}
		}
		if at != len(part) {
			return nil, fmt.Errorf("%s: branch %d: rank %d sent %d values, expected %d", s.name, bi, src,
				len(part), at)
		}
	}
	// Gradient accumulators, one per gathered row, filled by the backward.
	for key, ks := range g.k {
		g.dk[key] = make([]float64, len(ks))
		g.dv[key] = make([]float64, len(ks))
	}
	return g, nil
}

// segmentBlock is one (batch, head, segment) attention problem of a gathered
// branch: the local selected queries and the segment's gathered keys, compacted so
// that in-segment index m stands for position segLo + o + m·r.
type segmentBlock struct {
	b, h, hk   int
	key        [3]int
	qRows      []int // global positions of the local queries
	qPos       int   // compact index of the first query
	kFrom, kTo int   // range of the segment's keys in the gathered list
}

// blocks enumerates the segment blocks of branch br for this rank's queries.
func (s *shardedDilated) blocks(br attention.Branch, g *gathered, fn func(sb segmentBlock)) {
	d := s.d
	grp := d.Hq / d.Hkv
	w, r := br.Segment, br.Dilation
	for b := range d.B {
		for h := range d.Hq {
			hk := h / grp
			o := s.cfg.Offsets.Offset(h, d.Hq, r)
			key := [3]int{b, hk, o}
			pos := g.pos[key]
			// The segments that overlap this rank's block [lo, hi): from the one that
			// holds lo, w positions at a time.
			for segLo := s.lo / w * w; segLo < s.hi; segLo += w {
				segHi := min(segLo+w, s.total)
				qs := selected(max(segLo, s.lo), min(segHi, s.hi), br, o)
				if len(qs) == 0 {
					continue
				}
				// pos is sorted (gather appends ranks in order, positions ascending), so the
				// segment's keys are one range of the gathered list.
				from, _ := slices.BinarySearch(pos, segLo)
				to, _ := slices.BinarySearch(pos, segHi)
				// qPos puts the block's first query at its compact index, so that causal
				// compares compact indices, queries and keys alike.
				fn(segmentBlock{b: b, h: h, hk: hk, key: key, qRows: qs, qPos: (qs[0] - segLo - o) / r,
					kFrom: from, kTo: to})
			}
		}
	}
}

// qRowsOf copies rows (b, p − lo, h) of a [B, L, Hq, D] tensor for global positions ps.
func (s *shardedDilated) qRowsOf(x []float64, b, h int, ps []int) []float64 {
	d := s.d
	out := make([]float64, 0, len(ps)*d.D)
	for _, p := range ps {
		r := ((b*d.T+p-s.lo)*d.Hq + h) * d.D
		out = append(out, x[r:r+d.D]...)
	}
	return out
}

// branchCfg is the configuration of branch i alone: each branch runs as its
// own dilated attention, and the merge of §3 combines their outputs.
func (s *shardedDilated) branchCfg(i int) attention.DilatedConfig {
	c := s.cfg
	c.Branches = s.cfg.Branches[i : i+1]
	return c
}

// kernelShardedDilated merges, per row, every branch in order: local branches with
// DilatedBranch on the rank's block, the others against the gathered sparse k/v.
func kernelShardedDilated(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	s, err := newShardedDilated(n, args, opts)
	if err != nil {
		return nil, err
	}
	q, k, v := args[0].F, args[1].F, args[2].F
	d := s.d
	o := make([]float64, len(q))
	// As in the ring: −Inf is the merge's identity.
	lse := slices.Repeat([]float64{negInf}, d.B*d.Hq*d.T)
	for i, br := range s.cfg.Branches {
		// A branch inside the rank runs as in the unsharded kernel, on the block.
		if s.local(br) {
			bo, bl := attention.DilatedBranch(q, k, v, d, s.cfg, i, s.scale)
			attention.MergeInto(o, lse, bo, bl, d)
			continue
		}
		// The other branches gather, then attend segment by segment.
		g, err := s.gather(k, v, br, i)
		if err != nil {
			return nil, err
		}
		s.blocks(br, g, func(sb segmentBlock) {
			nq, nk := len(sb.qRows), sb.kTo-sb.kFrom
			bd := attention.Dims{B: 1, T: nq, S: nk, Hq: 1, Hkv: 1, D: d.D}
			ks := g.k[sb.key][sb.kFrom*d.D : sb.kTo*d.D]
			vs := g.v[sb.key][sb.kFrom*d.D : sb.kTo*d.D]
			bo, bl := attention.DenseAt(s.qRowsOf(q, sb.b, sb.h, sb.qRows), ks, vs, bd, sb.qPos, 0,
				s.cfg.Causal, s.scale)
			// Merge row by row into the accumulators.
			one := attention.Dims{B: 1, T: 1, S: 0, Hq: 1, Hkv: 1, D: d.D}
			for j, p := range sb.qRows {
				r := ((sb.b*d.T+p-s.lo)*d.Hq + sb.h) * d.D
				l := (sb.b*d.Hq+sb.h)*d.T + p - s.lo
				attention.MergeInto(o[r:r+d.D], lse[l:l+1], bo[j*d.D:(j+1)*d.D], bl[j:j+1], one)
			}
		})
	}
	return []*tensor.Tensor{floatsResult(n, 0, o), floatsResult(n, 1, lse)}, nil
}

// kernelShardedDilatedGrad is the exact backward: every branch's blocks run the
// FlashAttention-2 backward with the merged o and lse; the gathered rows' dk, dv
// are sent back to their owners and summed there in rank order (a reduce-scatter).
func kernelShardedDilatedGrad(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	s, err := newShardedDilated(n, args, opts)
	if err != nil {
		return nil, err
	}
	q, k, v, o, lse, do := args[0].F, args[1].F, args[2].F, args[3].F, args[4].F, args[5].F
	d := s.d
	dq := make([]float64, len(q))
	dk := make([]float64, len(k))
	dv := make([]float64, len(v))
	// add sums gradients into dst in the order the branches and blocks run,
	// which is fixed: the backward is deterministic too.
	add := func(dst, src []float64) {
		for i, x := range src {
			dst[i] += x
		}
	}
	for i, br := range s.cfg.Branches {
		if s.local(br) {
			gq, gk, gv := attention.DilatedBackward(q, k, v, o, lse, do, d, s.branchCfg(i), s.scale)
			add(dq, gq)
			add(dk, gk)
			add(dv, gv)
			continue
		}
		g, err := s.gather(k, v, br, i)
		if err != nil {
			return nil, err
		}
		s.blocks(br, g, func(sb segmentBlock) {
			nq, nk := len(sb.qRows), sb.kTo-sb.kFrom
			bd := attention.Dims{B: 1, T: nq, S: nk, Hq: 1, Hkv: 1, D: d.D}
			ks := g.k[sb.key][sb.kFrom*d.D : sb.kTo*d.D]
			vs := g.v[sb.key][sb.kFrom*d.D : sb.kTo*d.D]
			// The merged lse of the block's queries: with it each block's backward is
			// exact (FlashAttention-2's recomputation), not an approximation per branch.
			ls := make([]float64, nq)
			for j, p := range sb.qRows {
				ls[j] = lse[(sb.b*d.Hq+sb.h)*d.T+p-s.lo]
			}
			gq, gk, gv := attention.DenseAtBackward(s.qRowsOf(q, sb.b, sb.h, sb.qRows), ks, vs,
				s.qRowsOf(o, sb.b, sb.h, sb.qRows), ls, s.qRowsOf(do, sb.b, sb.h, sb.qRows), bd, sb.qPos,
				0, s.cfg.Causal, s.scale)
			for j, p := range sb.qRows {
				r := ((sb.b*d.T+p-s.lo)*d.Hq + sb.h) * d.D
				add(dq[r:r+d.D], gq[j*d.D:(j+1)*d.D])
			}
			add(g.dk[sb.key][sb.kFrom*d.D:sb.kTo*d.D], gk)
			add(g.dv[sb.key][sb.kFrom*d.D:sb.kTo*d.D], gv)
		})
		// Reduce-scatter: the rows rank t owns go back to t, in the gather's order.
		parts := make([][]float64, s.c.Size())
		for b := range d.B {
			for hk := range d.Hkv {
				for _, o := range g.res[hk] {
					key := [3]int{b, hk, o}
					at := 0
					for t, cnt := range g.rankCounts[key] {
						for j := at; j < at+cnt; j++ {
							parts[t] = append(parts[t], g.dk[key][j*d.D:(j+1)*d.D]...)
							parts[t] = append(parts[t], g.dv[key][j*d.D:(j+1)*d.D]...)
						}
						at += cnt
					}
				}
			}
		}
		got, err := s.c.AllToAll(fmt.Sprintf("%s: reduce_scatter of branch %d", s.name, i), parts)
		if err != nil {
			return nil, err
		}
		// Rank src's part holds its gradients for this rank's rows, in the order of
		// this rank's gather payload; sum them in rank order.
		for src, part := range got {
			if len(part) != len(parts[s.c.Rank()]) {
				return nil, fmt.Errorf("%s: branch %d: rank %d sent %d gradient values, rank %d expects %d",
					s.name, i, src, len(part), s.c.Rank(), len(parts[s.c.Rank()]))
			}
			at := 0
			for b := range d.B {
				for hk := range d.Hkv {
					for _, o := range g.res[hk] {
						for _, p := range selected(s.lo, s.hi, br, o) {
							r := ((b*d.T+p-s.lo)*d.Hkv + hk) * d.D
							add(dk[r:r+d.D], part[at:at+d.D])
							add(dv[r:r+d.D], part[at+d.D:at+2*d.D])
							at += 2 * d.D
						}
					}
				}
			}
		}
	}
	return []*tensor.Tensor{floatsResult(n, 0, dq), floatsResult(n, 1, dk), floatsResult(n, 2, dv)}, nil
}
