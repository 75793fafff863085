package perf

import (
	"fmt"

	fk "github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/perf/flash"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// DilatedShape is one LongNet benchmark: bf16 [1, T, H, D], causal, with
// branches (Segments[i], Dilations[i]) and paper offsets.
type DilatedShape struct {
	T                   int64
	H, D                int
	Segments, Dilations []int64
}

// FwdFLOPs counts the useful forward FLOPs as the anchor does:
// Σ_i (T/w_i)·(w_i/r_i)²/2 · 4·H·D.
func (s DilatedShape) FwdFLOPs() float64 {
	var f float64
	for i, w := range s.Segments {
		w = min(w, s.T)
		n := float64(s.T / w)
		m := float64(w / s.Dilations[i])
		f += 4 * n * m * m * 0.5 * float64(s.H) * float64(s.D)
	}
	return f
}

// DilatedRow is the measurement of one dilated configuration.
type DilatedRow struct {
	Fwd, Bwd, FwdBwd Timing
	// ExtraBytes is the device memory beyond the inputs (q, k, v, do) and the
	// outputs and gradients (o, dq, dk, dv): lse, delta, fp32 accumulators and
	// the fused backward's dQ workspace.
	ExtraBytes int64
}

// Dilated times LongNet dilated attention on the tensor-core kernels.
func (b *Bench) Dilated(s DilatedShape, t Tiles) (DilatedRow, error) {
	if len(s.Segments) == 0 || len(s.Segments) != len(s.Dilations) {
		return DilatedRow{}, fmt.Errorf("perf: segments %v and dilations %v: want equal, non-empty lists", s.Segments, s.Dilations)
	}
	mark := len(b.frees)
	defer b.freeFrom(mark)
	// Not Desc.Defaults: NewDilated picks the tiles of a branch for those left zero.
	desc := fk.Desc{B: 1, T: s.T, S: s.T, Hq: s.H, Hkv: s.H, D: s.D, Causal: true,
		Br: t.Br, Bc: t.Bc, BwdBr: t.BwdBr, BwdBc: t.BwdBc, DQBr: t.DQBr, DQBc: t.DQBc, Stages: t.Stages,
		WM: t.WM, DQWM: t.DQWM, DQ: fk.DQMode(t.DQ), Tier: t.Tier}
	var brs []flash.Branch
	for i, w := range s.Segments {
		brs = append(brs, flash.Branch{W: w, R: int(s.Dilations[i])})
	}
	a, err := flash.NewDilated(b.Dev, b.Cache, desc, brs)
	if err != nil {
		return DilatedRow{}, err
	}
	defer a.Close()
	n := s.T * int64(s.H) * int64(s.D)
	nl := int64(s.H) * s.T
	var in [4]cuda.DevicePtr
	for i := range in {
		if in[i], err = b.RandomBF16(n, uint64(i+1)); err != nil {
			return DilatedRow{}, err
		}
	}
	q, k, v, do := in[0], in[1], in[2], in[3]
	fs, bs := a.ScratchBytes()
	row := DilatedRow{ExtraBytes: 8*nl + max(fs, bs) + a.WorkspaceBytes()}
	var p [8]cuda.DevicePtr // o dq dk dv lse delta accA (also the forward's oAcc) accB
	sizes := []int64{2 * n, 2 * n, 2 * n, 2 * n, 4 * nl, 4 * nl, 4 * n, 4 * n}
	for i, sz := range sizes {
		if p[i], err = b.Alloc(sz); err != nil {
			return row, err
		}
	}
	o, dq, dk, dv, lse, delta, accA, accB := p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]
	fwd := func() error { return a.Forward(b.Stream, o, lse, q, k, v, accA) }
	bwd := func() error {
		return a.Backward(b.Stream, dq, dk, dv, q, k, v, o, lse, do, delta, accA, accB)
	}
	if row.Fwd, err = Time(b.Dev, b.Stream, b.Warm, b.Iters, fwd); err != nil {
		return row, err
	}
	if row.Bwd, err = Time(b.Dev, b.Stream, b.Warm, b.Iters, bwd); err != nil {
		return row, err
	}
	row.FwdBwd, err = Time(b.Dev, b.Stream, b.Warm, b.Iters, func() error {
		if err := fwd(); err != nil {
			return err
		}
		return bwd()
	})
	return row, err
}

// Result converts a row to lcc's figures at shape s.
func (r DilatedRow) Result(s DilatedShape) Result {
	f := s.FwdFLOPs()
	return Result{Who: "lcc", Figures: []Figure{
		{Phase: "fwd", Ms: r.Fwd.Ms(), TFLOPs: f / r.Fwd.Ms() / 1e9},
		{Phase: "bwd", Ms: r.Bwd.Ms(), TFLOPs: 2.5 * f / r.Bwd.Ms() / 1e9},
		{Phase: "fwdbwd", Ms: r.FwdBwd.Ms(), TFLOPs: 3.5 * f / r.FwdBwd.Ms() / 1e9},
	}}
}
