package driver

import (
	"bytes"
	"math"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

// TestZeroGradFloor: a gradient that is zero in exact arithmetic (REF holds f32
// noise) is measured against the unit roundoff of the run's storage times the
// largest REF gradient's norm. The same noise, of the size bf16 storage leaves
// (1e-5 of the largest gradient: hf_bert's key biases on the GPU show 1.3e-7),
// passes in bf16 and fails in f32, where the floor is 1e-6; an error of 10% on a
// real but small gradient (2e-5 of the largest, as hf_bert's query biases) is
// caught in both, since the floor applies only to what REF finds zero.
func TestZeroGradFloor(t *testing.T) {
	const largest = 1000.0
	fill := func(n int, f func(i int) float64) *tensor.Tensor {
		x := tensor.New(tensor.F32, int64(n))
		for i := range x.F {
			x.F[i] = f(i)
		}
		return x
	}
	// REF: a large gradient "big" (norm 1000), a small real one "small", and an
	// exact zero "zero" with f32 noise (1e-12 of the largest).
	refBig := fill(4, func(int) float64 { return largest / 2 })
	refSmall := fill(4, func(i int) float64 { return 1e-2 * float64(1+i%2) })
	refZero := fill(4, func(i int) float64 { return 1e-9 * float64(1-2*(i%2)) })
	ref := &safetensors.File{Tensors: map[string]*tensor.Tensor{}}
	b := ir.NewBuilder("g")
	for _, g := range []struct {
		name string
		t    *tensor.Tensor
	}{{"big", refBig}, {"small", refSmall}, {"zero", refZero}} {
		b.Weight(g.name, tensor.New(tensor.F32, 4))
		ref.Names = append(ref.Names, autodiff.GradPrefix+g.name)
		ref.Tensors[autodiff.GradPrefix+g.name] = g.t
	}
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	noise := 1e-5 * largest / 2 // per element; norm 1e-5 × largest
	for _, tc := range []struct {
		what     string
		storage  tensor.DType
		zero     *tensor.Tensor // lcc's gradient for "zero"
		smallErr float64        // relative error put on "small"
		wantFail string         // the failing gradient, or ""
	}{
		{"bf16 noise on a zero, bf16", tensor.BF16, fill(4, func(i int) float64 { return noise * float64(1-2*(i%2)) }), 0, ""},
		{"bf16 noise on a zero, f32", tensor.F32, fill(4, func(i int) float64 { return noise * float64(1-2*(i%2)) }), 0, "grad.zero (zero up to rounding)"},
		{"a real error on a small gradient, bf16", tensor.BF16, refZero, 0.1, "grad.small"},
		{"a real error on a small gradient, f32", tensor.F32, refZero, 0.1, "grad.small"},
	} {
		got := map[string]*tensor.Tensor{
			"big":   refBig,
			"small": fill(4, func(i int) float64 { return refSmall.F[i] * (1 + tc.smallErr) }),
			"zero":  tc.zero,
		}
		var cs []Comparison
		grad := func(p *ir.Param) *tensor.Tensor { return got[p.Name] }
		if err := compareGrads(f, ref, "ref", &bytes.Buffer{}, grad, nil, tc.storage,
			func(c Comparison) { cs = append(cs, c) }); err != nil {
			t.Fatal(err)
		}
		var failed []string
		for _, c := range cs {
			if !(c.RelErr <= 2e-2) {
				failed = append(failed, c.Name)
			}
		}
		if tc.wantFail == "" && len(failed) > 0 || tc.wantFail != "" && (len(failed) != 1 || failed[0] != tc.wantFail) {
			t.Errorf("%s: beyond 2e-2: %q, want %q (%+v)", tc.what, failed, tc.wantFail, cs)
		}
	}
	if ZeroGradFloor(tensor.BF16) != math.Ldexp(1, -8) || ZeroGradFloor(tensor.F32) != 1e-6 {
		t.Errorf("ZeroGradFloor: bf16 %g, f32 %g", ZeroGradFloor(tensor.BF16), ZeroGradFloor(tensor.F32))
	}
}
