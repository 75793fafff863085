package flash

import (
	"fmt"
	"slices"

	fk "github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// Branch is one LongNet branch: segments of W rows, every R-th row.
type Branch struct {
	W int64
	R int
}

// branch holds the kernels of one branch: the forward that merges into the
// running fp32 output, the dK/dV kernels (one per group member when the query
// heads of a kv head select different rows) and the dQ kernel.
type branch struct {
	fwd, dq *kernel
	dkdv    []*kernel
}

// Dilated is LongNet dilated attention (docs/design.md §3) on the tensor-core
// kernels: each branch runs as a batched causal attention over its selected rows,
// read in place with a row stride, and merges (O_i, LSE_i) into an fp32 running
// (o, lse) in branch order. The backward is the exact one: every branch uses the
// global lse and delta = rowsum(dO ∘ O) of the merged output, and dq, dk, dv sum
// over the branches in fp32 in a fixed order, so gradients are bitwise
// reproducible.
type Dilated struct {
	Desc     fk.Desc // the shape; W, R, Accumulate are set per branch
	Branches []Branch
	ld       loader
	brs      []branch
	delta    *kernel
	fillO    *kernel // fp32 o accumulator (and dq's) := 0
	fillKV   *kernel // dk, dv accumulators := 0
	fillLSE  *kernel // lse := −Inf
	convO    *kernel // [B,T,Hq,D] fp32 → bf16
	convKV   *kernel // [B,T,Hkv,D] fp32 → bf16
	fused    *fusedBackward
}

// fusedBackward is the fused backward of every branch (Desc.DQ = DQFused):
// one kernel per branch adds dK, dV into the fp32 sums and dQ into one 64-bit
// fixed-point sum shared by all branches (integer addition: the same bits in
// any order; the bound of codegen/cuda/flash's fixed point holds for the sum
// over the branches too, as the branches' probabilities under the global lse
// sum to at most 1). It runs in row chunks of rows rows, each a multiple of
// every segment, so the workspace ws holds one chunk's dQ sum: two fp32
// words an element in all would exceed the scratch of the split backward.
type fusedBackward struct {
	rows              int64     // rows per chunk
	dkdvq             []*kernel // one per branch, a branch of dilation 1 first
	first             bool      // dkdvq[0] stores dK, dV: no zeroing
	fill, bound, conv *kernel
	ws                cuda.DevicePtr
	wsBytes           int64
}

// dilatedFused reports whether the backward of d fuses dQ into the dK/dV
// kernels: DQAuto and DQFused do when every query head has its own kv head
// (grouped-query heads of one kv head select different rows, so their dK/dV
// run per member, which the fused sum does not cover). The fused backward is
// faster on the H200 (BENCHMARKS.md: 1M tokens, 175.4 ms against 209.9 split,
// tier 1).
func dilatedFused(d fk.Desc) bool { return d.DQ != fk.DQSplit && d.Hq == d.Hkv }

// fusedChunks is the number of row chunks of the fused backward: 4 (a
// quarter of the dQ sum at a time, so the workspace is 2 bytes an element of
// dQ) when the batch is one and T/4 is a multiple of every segment, else 2,
// else 1. A chunk must hold whole segments of every branch (and more than one
// segment of a branch without dilation, which would otherwise be dense).
func fusedChunks(d fk.Desc, branches []Branch) int64 {
	for _, c := range []int64{4, 2} {
		ok := d.B == 1 && d.T%c == 0
		for _, b := range branches {
			rows := d.T / c
			ok = ok && rows%b.W == 0 && (b.R > 1 || b.W < rows)
		}
		if ok {
			return c
		}
	}
	return 1
}

// NewDilated loads the kernels of dilated attention with shape d (S = T) and the
// given branches; d.Offsets chooses the heads' offsets. Tiles left zero in d
// take the defaults of a dilated branch (pass d before Desc.Defaults, which
// would pick the dense tiles of the whole sequence).
func NewDilated(dev *cuda.Device, cache *cuda.Cache, d fk.Desc, branches []Branch) (*Dilated, error) {
	if len(branches) == 0 {
		return nil, fmt.Errorf("flash: dilated attention needs at least one branch")
	}
	a := &Dilated{Desc: d.Defaults(), Branches: branches, ld: loader{dev: dev, cache: cache}}
	fail := func(err error) (*Dilated, error) {
		a.Close()
		return nil, fmt.Errorf("flash: dilated attention: %w", err)
	}
	for _, b := range branches {
		if b.W <= 0 || b.R <= 0 {
			return fail(fmt.Errorf("branch (%d, %d): want a positive segment and dilation", b.W, b.R))
		}
	}
	fused := dilatedFused(d)
	if fused {
		if err := a.loadFused(d); err != nil {
			return fail(err)
		}
	}
	for _, b := range branches {
		bd := d
		bd.DQ = fk.DQSplit
		bd.W, bd.R, bd.Accumulate = b.W, b.R, true
		if b.W >= d.T && b.R == 1 {
			bd.W = d.T
		}
		var br branch
		kf, err := fk.Forward(bd)
		if err != nil {
			return fail(err)
		}
		if br.fwd, err = a.ld.load(kf); err != nil {
			return fail(err)
		}
		if fused {
			a.brs = append(a.brs, br)
			continue
		}
		kq, err := fk.DQ(bd)
		if err != nil {
			return fail(err)
		}
		if br.dq, err = a.ld.load(kq); err != nil {
			return fail(err)
		}
		for _, md := range bd.Members() {
			kk, err := fk.DKDV(md)
			if err != nil {
				return fail(err)
			}
			kl, err := a.ld.load(kk)
			if err != nil {
				return fail(err)
			}
			br.dkdv = append(br.dkdv, kl)
		}
		a.brs = append(a.brs, br)
	}
	nq := d.B * d.T * int64(d.Hq) * int64(d.D)
	nk := d.B * d.T * int64(d.Hkv) * int64(d.D)
	nl := d.B * int64(d.Hq) * d.T
	kd, err := fk.Delta(a.Desc)
	if err != nil {
		return fail(err)
	}
	for _, x := range []struct {
		dst **kernel
		k   fk.Kernel
	}{{&a.delta, kd}, {&a.fillO, fk.Fill(nq, 0)}, {&a.fillKV, fk.Fill(nk, 0)},
		{&a.fillLSE, fk.Fill(nl, 0xff800000)}, {&a.convO, fk.Convert(nq)}, {&a.convKV, fk.Convert(nk)}} {
		if *x.dst, err = a.ld.load(x.k); err != nil {
			return fail(err)
		}
	}
	return a, nil
}

// loadFused loads the fused backward's kernels and allocates its workspace.
func (a *Dilated) loadFused(d fk.Desc) error {
	c := fusedChunks(d, a.Branches)
	cd := d
	cd.T, cd.S, cd.LT = d.T/c, d.S/c, d.T
	cd.DQ = fk.DQFused // the branches accumulate: DQAuto would split them
	// Every branch's key tiles add into the one dQ sum, so its fixed point
	// counts them all (Desc.DQAdds); the branches and the convert share it.
	bc := int64(cd.Defaults().BwdBc)
	for _, b := range a.Branches {
		cd.DQAdds += (fk.SegmentRows(b.W, cd.T, b.R) + bc - 1) / bc
	}
	f := &fusedBackward{rows: cd.T}
	a.fused = f
	// A branch of dilation 1 selects every row: run first, it stores the
	// sums. The order of the others stays, so the sums are in a fixed order.
	order := slices.Clone(a.Branches)
	if i := slices.IndexFunc(order, func(b Branch) bool { return b.R == 1 }); i >= 0 {
		b := order[i]
		copy(order[1:i+1], order[:i])
		order[0] = b
		f.first = true
	}
	for i, b := range order {
		bd := cd
		bd.W, bd.R, bd.Accumulate, bd.First = b.W, b.R, true, i == 0 && f.first
		if b.W >= cd.T && b.R == 1 {
			bd.W = cd.T
		}
		k, err := fk.DKDV(bd)
		if err != nil {
			return err
		}
		kl, err := a.ld.load(k)
		if err != nil {
			return err
		}
		f.dkdvq = append(f.dkdvq, kl)
	}
	kb, err := fk.DQBound(cd)
	if err != nil {
		return err
	}
	kc, err := fk.ConvertDQ(cd)
	if err != nil {
		return err
	}
	nw := cd.DQWorkspace()
	for _, x := range []struct {
		dst **kernel
		k   fk.Kernel
	}{{&f.fill, fk.Fill(nw, 0)}, {&f.bound, kb}, {&f.conv, kc}} {
		if *x.dst, err = a.ld.load(x.k); err != nil {
			return err
		}
	}
	f.wsBytes = 4 * nw
	if f.ws, err = a.ld.dev.Alloc(int(f.wsBytes)); err != nil {
		return fmt.Errorf("dQ workspace of %d bytes: %w", f.wsBytes, err)
	}
	return nil
}

// WorkspaceBytes is the device memory Dilated holds itself: the fused
// backward's dQ workspace (0 for the split backward).
func (a *Dilated) WorkspaceBytes() int64 {
	if a.fused == nil {
		return 0
	}
	return a.fused.wsBytes
}

// Close unloads the kernels and frees the fused backward's workspace.
func (a *Dilated) Close() error {
	if a.fused != nil && a.fused.ws != 0 {
		a.ld.dev.Free(a.fused.ws)
		a.fused.ws = 0
	}
	return a.ld.close()
}

// ScratchBytes is the fp32 scratch the forward and the backward need, in bytes:
// Forward's oAcc (4·B·T·Hq·D), and Backward's accA (4·B·T·max(Hq, Hkv)·D) and
// accB (4·B·T·Hkv·D). The forward's oAcc may be the backward's accA.
func (a *Dilated) ScratchBytes() (fwd, bwd int64) {
	d := a.Desc
	nq := d.B * d.T * int64(d.Hq) * int64(d.D)
	nk := d.B * d.T * int64(d.Hkv) * int64(d.D)
	return 4 * nq, 4*max(nq, nk) + 4*nk
}

// Forward queues o (bf16) and lse (the merged log-sum-exp) from q, k, v; oAcc is
// an fp32 [B,T,Hq,D] scratch buffer. Rows no branch selects get o = 0, lse = −Inf.
func (a *Dilated) Forward(s *cuda.Stream, o, lse, q, k, v, oAcc cuda.DevicePtr) error {
	if err := a.fillO.launch(s, oAcc); err != nil {
		return err
	}
	if err := a.fillLSE.launch(s, lse); err != nil {
		return err
	}
	for _, br := range a.brs {
		if err := br.fwd.launch(s, oAcc, lse, q, k, v); err != nil {
			return err
		}
	}
	return a.convO.launch(s, o, oAcc)
}

// Backward queues dq, dk, dv (bf16) from the inputs, the merged o and lse of
// Forward and do. delta ([B,Hq,T] fp32), accA and accB (fp32, ScratchBytes) are
// scratch. The split backward sums dK and dV of every branch first (in accA
// and accB) and rounds them, then sums dQ in accA, so its scratch is two fp32
// tensors, not three; the fused one sums dK and dV in accA and accB and dQ in
// its own workspace, one row chunk at a time.
func (a *Dilated) Backward(s *cuda.Stream, dq, dk, dv, q, k, v, o, lse, do, delta, accA, accB cuda.DevicePtr) error {
	type launch struct {
		k    *kernel
		args []any
	}
	ls := []launch{{a.delta, []any{delta, o, do}}}
	if f := a.fused; f == nil || !f.first {
		ls = append(ls, launch{a.fillKV, []any{accA}}, launch{a.fillKV, []any{accB}})
	}
	if f := a.fused; f != nil {
		d := a.Desc
		// Elements before a chunk's first row (the batch is one when rows < T).
		qb, kb := cuda.DevicePtr(f.rows*int64(d.Hq*d.D)), cuda.DevicePtr(f.rows*int64(d.Hkv*d.D))
		for c := cuda.DevicePtr(0); int64(c)*f.rows < d.T; c++ {
			ls = append(ls, launch{f.fill, []any{f.ws}},
				launch{f.bound, []any{f.ws, do + 2*c*qb, k + 2*c*kb, v + 2*c*kb, delta}})
			for _, kk := range f.dkdvq {
				ls = append(ls, launch{kk, []any{accA + 4*c*kb, accB + 4*c*kb, q + 2*c*qb, k + 2*c*kb, v + 2*c*kb,
					do + 2*c*qb, lse + 4*c*cuda.DevicePtr(f.rows), delta + 4*c*cuda.DevicePtr(f.rows), f.ws}})
			}
			ls = append(ls, launch{f.conv, []any{dq + 2*c*qb, f.ws}})
		}
		ls = append(ls, launch{a.convKV, []any{dk, accA}}, launch{a.convKV, []any{dv, accB}})
	} else {
		for _, br := range a.brs {
			for _, kk := range br.dkdv {
				ls = append(ls, launch{kk, []any{accA, accB, q, k, v, do, lse, delta}})
			}
		}
		ls = append(ls, launch{a.convKV, []any{dk, accA}}, launch{a.convKV, []any{dv, accB}}, launch{a.fillO, []any{accA}})
		for _, br := range a.brs {
			ls = append(ls, launch{br.dq, []any{accA, q, k, v, do, lse, delta}})
		}
		ls = append(ls, launch{a.convO, []any{dq, accA}})
	}
	for _, l := range ls {
		if err := l.k.launch(s, l.args...); err != nil {
			return err
		}
	}
	return nil
}
