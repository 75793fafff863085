package exec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// windowGraph is causal sliding-window attention (window w) and its gradient
// over T tokens; with lens, also over packed documents of those lengths.
func windowGraph(t *testing.T, b, tl, h, hkv, d, w int64, lens []int64, seed uint64) (*ir.Func, map[string]*tensor.Tensor) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	in := map[string]*tensor.Tensor{}
	bl := ir.NewBuilder("attn_window")
	fl := normalInputs(bl, rng, in)
	q, k, v, do := fl("q", b, tl, h, d), fl("k", b, tl, hkv, d), fl("v", b, tl, hkv, d), fl("do", b, tl, h, d)
	attrs := ir.A("causal", true, "scale", 1/math.Sqrt(float64(d)), "window", w)
	args := []*ir.Value{q, k, v}
	if lens != nil {
		in["starts"] = docStartsOf(b, lens)
		args = append(args, bl.Input("starts", ir.T(tensor.I64, b, tl)))
		attrs = ir.A("causal", true, "scale", 1/math.Sqrt(float64(d)), "window", w, "docs", true)
	}
	r := bl.Apply(ir.OpAttention, attrs, args...)
	g := bl.Apply(ir.OpAttentionGrad, attrs, append([]*ir.Value{q, k, v, r[0], r[1], do}, args[3:]...)...)
	for i, n := range []string{"o", "lse"} {
		bl.Output(n, r[i])
	}
	for i, n := range []string{"dq", "dk", "dv"} {
		bl.Output(n, g[i])
	}
	f, err := bl.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f, in
}

// TestFlashWindowLowering: a sliding window lowers to the tensor-core kernels
// at both tiers, its width in their source; with f32 storage or a head dim the
// tensor cores do not take, the scalar kernels run it, and the program says why.
func TestFlashWindowLowering(t *testing.T) {
	f, _ := windowGraph(t, 1, 300, 2, 1, 64, 100, nil, 1)
	for _, arch := range []string{"sm_90a", "sm_90"} {
		p, err := codegen.Build(f, codegen.Options{Arch: arch, Storage: tensor.BF16})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range p.Kernels {
			if k.Op == "attention.flash.fwd" || k.Op == "attention.flash.dkdvdq" {
				n++
				if !strings.Contains(k.Source, "window=100") || !strings.Contains(k.Source, "#define FA_WIN 100LL") {
					t.Errorf("%s %s: the source does not carry the window", arch, k.Op)
				}
			}
		}
		if n != 2 {
			t.Errorf("%s: %d windowed flash kernels, want the forward and the fused backward", arch, n)
		}
		for _, c := range p.Attention {
			if !strings.Contains(c.Note, "sliding window 100") {
				t.Errorf("%s: choice %+v does not note the window", arch, c)
			}
		}
	}
	p, err := codegen.Build(f, codegen.Options{Arch: "sm_90a", Storage: tensor.F32})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Attention {
		if c.Kernel != codegen.KernelScalar || c.Why == "" {
			t.Errorf("f32 storage: choice %+v, want the scalar kernels with a reason", c)
		}
	}
	for _, k := range p.Kernels {
		if strings.HasPrefix(k.Op, "attention") && !strings.Contains(k.Source, "#define AT_WIN 100LL") {
			t.Errorf("scalar %s: the source does not carry the window", k.Op)
		}
	}
}

// TestGPUFlashWindow runs sliding-window attention through the executor (bf16
// on the tensor cores, f32 and head dim 96 on the scalar kernels; outputs
// poisoned) against the CPU interpreter.
func TestGPUFlashWindow(t *testing.T) {
	dev := devicetest.Open(t)
	f, in := windowGraph(t, 2, 700, 4, 2, 128, 200, nil, 3)
	compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2)
	f, in = windowGraph(t, 1, 600, 8, 2, 64, 77, []int64{257, 1, 342}, 4)
	compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2)
	f, in = windowGraph(t, 1, 200, 4, 2, 96, 33, nil, 5)
	compare(t, dev, f, in, Options{}, 1e-4)
	// Head dim 96 in bf16: the 128 kernels, padded (flash.Desc.KD).
	f, in = windowGraph(t, 1, 300, 4, 2, 96, 50, nil, 6)
	compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2)
	// Head dim 256: tier 1's kernels.
	f, in = windowGraph(t, 1, 300, 2, 1, 256, 70, nil, 7)
	compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2)
}

// TestFlashPaddedHeadDim: head dims that are multiples of 8 up to 256 lower to
// the tensor-core kernels of 64, 128 or 256 columns, reading and writing their
// own; above 128 at tier 1 even for sm_90a; 100 stays on the scalar kernels and
// the program says why.
func TestFlashPaddedHeadDim(t *testing.T) {
	for _, c := range []struct {
		d, kd int64
		tier  int
	}{{96, 128, 2}, {80, 128, 2}, {32, 64, 2}, {256, 256, 1}, {192, 256, 1}, {100, 0, 0}} {
		f, _ := attentionGraph(t, 1, 256, 256, 2, 2, c.d, true, 1)
		p, err := codegen.Build(f, codegen.Options{Arch: "sm_90a", Storage: tensor.BF16})
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range p.Attention {
			if c.kd == 0 {
				if ch.Kernel != codegen.KernelScalar || !strings.Contains(ch.Why, "head dim 100") {
					t.Errorf("D=%d: %+v, want the scalar kernels naming the head dim", c.d, ch)
				}
			} else if ch.Kernel != codegen.KernelFlash || ch.Tier != c.tier {
				t.Errorf("D=%d: %+v, want the tensor-core kernels of tier %d", c.d, ch, c.tier)
			} else if want := fmt.Sprintf("head dim %d computed at %d", c.d, c.kd); c.d != c.kd &&
				!strings.Contains(ch.Note, want) || c.tier == 1 && !strings.Contains(ch.Note, "tier 2 stops") {
				t.Errorf("D=%d: note %q, want %q (and tier 1's reason at 256)", c.d, ch.Note, want)
			}
		}
		if c.kd == 0 {
			continue
		}
		for _, k := range p.Kernels {
			if k.Op == "attention.flash.fwd" && (!strings.Contains(k.Source, fmt.Sprintf("#define FA_D %d\n", c.kd)) ||
				!strings.Contains(k.Source, fmt.Sprintf("#define FA_DG %d\n", c.d))) {
				t.Errorf("D=%d: the forward does not compute at %d over rows of %d", c.d, c.kd, c.d)
			}
		}
	}
}

// TestFlashSplitHeadsLowering: a grouped-query backward with few CTAs splits by
// query head at either tier (flash.SplitsHeads): the dK/dV kernel writes each
// head's fp32 parts and the reduction sums them into dk and dv; with as many
// kv heads as query heads it does not.
func TestFlashSplitHeadsLowering(t *testing.T) {
	for _, c := range []struct {
		arch    string
		hq, hkv int64
		split   bool
	}{{"sm_90a", 8, 2, true}, {"sm_90", 8, 2, true}, {"sm_90a", 4, 4, false}} {
		f, _ := attentionGraph(t, 1, 512, 512, c.hq, c.hkv, 64, true, 1)
		p, err := codegen.Build(f, codegen.Options{Arch: c.arch, Storage: tensor.BF16})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, st := range p.Plan.Steps {
			if st.Op == "attention.flash.dkvreduce" {
				n++
			}
		}
		if (n == 1) != c.split || n > 1 {
			t.Errorf("%s Hq=%d Hkv=%d: %d reductions, want split=%v", c.arch, c.hq, c.hkv, n, c.split)
		}
	}
}
