package flash

import (
	"fmt"

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
}

// NewDilated loads the kernels of dilated attention with shape d (S = T) and the
// given branches; d.Offsets chooses the heads' offsets.
func NewDilated(dev *cuda.Device, cache *cuda.Cache, d fk.Desc, branches []Branch) (*Dilated, error) {
	d = d.Defaults()
	if len(branches) == 0 {
		return nil, fmt.Errorf("flash: dilated attention needs at least one branch")
	}
	a := &Dilated{Desc: d, Branches: branches, ld: loader{dev: dev, cache: cache}}
	fail := func(err error) (*Dilated, error) {
		a.Close()
		return nil, fmt.Errorf("flash: dilated attention: %w", err)
	}
	for _, b := range branches {
		if b.W <= 0 || b.R <= 0 {
			return fail(fmt.Errorf("branch (%d, %d): want a positive segment and dilation", b.W, b.R))
		}
		bd := d
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
	kd, err := fk.Delta(d)
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

// Close unloads the kernels.
func (a *Dilated) Close() error { return a.ld.close() }

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
// scratch: dK and dV of every branch are summed first (in accA and accB) and
// rounded, then dQ is summed in accA, so the backward's scratch is two fp32
// tensors, not three.
func (a *Dilated) Backward(s *cuda.Stream, dq, dk, dv, q, k, v, o, lse, do, delta, accA, accB cuda.DevicePtr) error {
	type launch struct {
		k    *kernel
		args []any
	}
	ls := []launch{{a.delta, []any{delta, o, do}}, {a.fillKV, []any{accA}}, {a.fillKV, []any{accB}}}
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
	for _, l := range ls {
		if err := l.k.launch(s, l.args...); err != nil {
			return err
		}
	}
	return nil
}
