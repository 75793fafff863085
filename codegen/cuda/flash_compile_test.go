package cuda_test

import (
	"encoding/json"
	"github.com/lcc-dev/lcc/internal/gputest"
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
		gputest.Skipf(t, "skipping: no NVRTC library: %v", err)
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

// TestFlashTierFromArch: a program built for sm_90a renders its attention on
// tier 2, says so per node, and its flash kernels carry their arch into the
// launch plan; built for sm_90 the same graph takes tier 1 and no kernel asks
// for an arch.
func TestFlashTierFromArch(t *testing.T) {
	b := ir.NewBuilder("tier")
	in := func(name string) *ir.Value { return b.Input(name, ir.T(tensor.F32, 1, 256, 2, 128)) }
	r := b.Apply(ir.OpAttention, ir.A("causal", true, "scale", 1/math.Sqrt(128)), in("q"), in("k"), in("v"))
	b.Output("o", r[0])
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		arch, kernelArch string
		tier             int
	}{{"sm_90a", "sm_90a", 2}, {"sm_90", "", 1}} {
		p, err := codegen.Build(f, codegen.Options{Arch: c.arch, Storage: tensor.BF16})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Attention) != 1 || p.Attention[0].Tier != c.tier {
			t.Errorf("%s: attention choices %+v, want tier %d", c.arch, p.Attention, c.tier)
		}
		found := false
		for _, k := range p.Kernels {
			if k.Op == "attention.flash.fwd" {
				found = true
				if k.Arch != c.kernelArch {
					t.Errorf("%s: forward kernel arch %q, want %q", c.arch, k.Arch, c.kernelArch)
				}
			}
		}
		if !found {
			t.Fatalf("%s: no flash forward kernel", c.arch)
		}
		js, err := codegen.PlanJSON(p.Kernels, p.Plan)
		if err != nil {
			t.Fatal(err)
		}
		var plan struct {
			Kernels []struct{ Op, Arch string }
		}
		if err := json.Unmarshal(js, &plan); err != nil {
			t.Fatal(err)
		}
		for _, k := range plan.Kernels {
			if k.Op == "attention.flash.fwd" && k.Arch != c.kernelArch {
				t.Errorf("%s: launch_plan.json gives the forward arch %q, want %q", c.arch, k.Arch, c.kernelArch)
			}
		}
	}
}
