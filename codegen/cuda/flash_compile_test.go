package cuda_test

import (
	"math"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	rcuda "github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// TestFlashProgramCompiles compiles, with NVRTC, the kernels a bf16 program gets
// for dense and dilated attention with head dim 128 and their gradients: the
// tensor-core kernels behind the prelude, as the executor loads them.
func TestFlashProgramCompiles(t *testing.T) {
	if _, err := rcuda.NVRTCVersion(); err != nil {
		t.Skipf("skipping: no NVRTC library: %v", err)
	}
	b := ir.NewBuilder("flash")
	in := func(name string, h int64) *ir.Value { return b.Input(name, ir.T(tensor.F32, 1, 64, h, 128)) }
	q, k, v, do := in("q", 4), in("k", 2), in("v", 2), in("do", 4)
	scale := 1 / math.Sqrt(128)
	for i, op := range []struct {
		fwd, grad ir.Op
		attrs     ir.Attrs
	}{
		{ir.OpAttention, ir.OpAttentionGrad, ir.A("causal", true, "scale", scale)},
		{ir.OpDilatedAttention, ir.OpDilatedAttentionGrad, ir.A("causal", true, "scale", scale,
			"segments", []int64{16, 32}, "dilations", []int64{1, 2}, "offsets", "paper")},
	} {
		r := b.Apply(op.fwd, op.attrs, q, k, v)
		g := b.Apply(op.grad, op.attrs, q, k, v, r[0], r[1], do)
		for j, x := range g {
			b.Output(string(rune('a'+i))+string(rune('0'+j)), x)
		}
	}
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	p, err := codegen.Build(f, codegen.Options{Arch: "compute_80", Storage: tensor.BF16})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kk := range p.Kernels {
		if len(kk.Op) < 15 || kk.Op[:15] != "attention.flash" {
			continue
		}
		n++
		if _, log, err := rcuda.Compile(kk.Source, kk.Name+".cu", "compute_80", nil); err != nil {
			t.Errorf("%s: %v\n%s", kk.Name, err, log)
		}
	}
	if n < 8 {
		t.Errorf("only %d tensor-core kernels in the program", n)
	}
}
