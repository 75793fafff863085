package exec

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// attentionGraph is attention and its gradient over random inputs: q [B,T,H,D],
// k, v [B,S,Hkv,D], the output gradient do.
func attentionGraph(t *testing.T, b, tl, s, h, hkv, d int64, causal bool, seed uint64) (*ir.Func, map[string]*tensor.Tensor) {
	return attentionGraphOf(t, b, tl, s, h, hkv, d, causal, seed, nil)
}

// attentionGraphOf is attentionGraph for dilated attention when dil holds its
// attributes (segments, dilations, offsets).
func attentionGraphOf(t *testing.T, b, tl, s, h, hkv, d int64, causal bool, seed uint64, dil ir.Attrs) (*ir.Func, map[string]*tensor.Tensor) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	in := map[string]*tensor.Tensor{}
	bl := ir.NewBuilder("attn")
	fl := normalInputs(bl, rng, in)
	q, k, v, do := fl("q", b, tl, h, d), fl("k", b, s, hkv, d), fl("v", b, s, hkv, d), fl("do", b, tl, h, d)
	scale := 1 / math.Sqrt(float64(d))
	fwd, grad, attrs := ir.OpAttention, ir.OpAttentionGrad, ir.A("causal", causal, "scale", scale)
	if dil != nil {
		fwd, grad = ir.OpDilatedAttention, ir.OpDilatedAttentionGrad
		attrs = ir.A("causal", causal, "scale", scale, "segments", dil.Ints("segments"),
			"dilations", dil.Ints("dilations"), "offsets", dil.String("offsets", "paper"))
	}
	r := bl.Apply(fwd, attrs, q, k, v)
	o, lse := r[0], r[1]
	g := bl.Apply(grad, attrs, q, k, v, o, lse, do)
	bl.Output("o", o)
	bl.Output("lse", lse)
	bl.Output("dq", g[0])
	bl.Output("dk", g[1])
	bl.Output("dv", g[2])
	f, err := bl.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f, in
}

// TestFlashLowering: with bf16 storage and head dim 64 or 128 attention lowers
// to the tensor-core kernels (the plan's step ops say so, and so does the
// program's record of each node's kernels, which the report prints); f32
// storage, other head dims and masks keep the scalar kernels.
func TestFlashLowering(t *testing.T) {
	ops := func(f *ir.Func, st tensor.DType) string {
		p, err := codegen.Build(f, codegen.Options{Arch: "sm_90", Storage: st})
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		flashSteps := false
		for _, x := range p.Plan.Steps {
			if strings.HasPrefix(x.Op, "attention") {
				s = append(s, x.Op)
				flashSteps = flashSteps || strings.Contains(x.Op, "flash")
			}
		}
		if len(p.Attention) != 2 {
			t.Fatalf("%d attention choices recorded, want 2 (forward and backward)", len(p.Attention))
		}
		for _, c := range p.Attention {
			if flash := c.Kernel == codegen.KernelFlash; flash != flashSteps || flash != (c.Why == "") ||
				f.Body[c.Node].Op.String() != c.Op {
				t.Errorf("choice %+v does not match the steps %v", c, s)
			}
		}
		return strings.Join(s, " ")
	}
	f, _ := attentionGraph(t, 1, 40, 40, 2, 2, 128, true, 1)
	// The dense backward is the fused one: zero the fixed-point dQ sum, its
	// bound, dK/dV with dQ, then dQ rounded to bf16 (grouped-query heads this
	// few split: TestFlashSplitHeadsLowering).
	want := "attention.flash.fwd attention.flash.delta attention.flash.fill attention.flash.dqbound " +
		"attention.flash.dkdvdq attention.flash.dqconvert"
	if got := ops(f, tensor.BF16); got != want {
		t.Errorf("bf16 D=128: steps %q, want %q", got, want)
	}
	if got := ops(f, tensor.F32); strings.Contains(got, "flash") {
		t.Errorf("f32 storage: steps %q use the bf16 tensor-core kernels", got)
	}
	// Options.ScalarAttention keeps the same nodes on the CUDA-core kernels.
	p, err := codegen.Build(f, codegen.Options{Arch: "sm_90", Storage: tensor.BF16, ScalarAttention: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.Plan.Steps {
		if strings.Contains(st.Op, "flash") {
			t.Errorf("ScalarAttention: step %s", st.Op)
		}
	}
	if len(p.Attention) != 2 || p.Attention[0].Kernel != codegen.KernelScalar || p.Attention[0].Why == "" {
		t.Errorf("ScalarAttention: choices %+v", p.Attention)
	}
	f, _ = attentionGraphOf(t, 1, 40, 40, 2, 1, 64, true, 1, ir.A("segments", []int64{16, 64}, "dilations", []int64{1, 2}))
	if got := ops(f, tensor.BF16); !strings.Contains(got, "attention.flash.fwd") || strings.Contains(got, "dilated_attention") {
		t.Errorf("dilated bf16 D=64: steps %q, want the tensor-core kernels", got)
	}
	f, _ = attentionGraph(t, 1, 40, 40, 2, 1, 12, true, 1)
	if got := ops(f, tensor.BF16); strings.Contains(got, "flash") {
		t.Errorf("D=12: steps %q use the tensor-core kernels", got)
	}
}

// TestGPUFlashAttention runs the tensor-core kernels through the executor with
// bf16 storage against the CPU interpreter (outputs poisoned first), and checks
// that two runs give bitwise the same gradients.
func TestGPUFlashAttention(t *testing.T) {
	dev := devicetest.Open(t)
	for _, c := range []struct {
		name               string
		b, t, s, h, hkv, d int64
		causal             bool
	}{
		{"causal-d128-gqa-ragged", 1, 203, 203, 4, 2, 128, true},
		{"causal-d64-batch2", 2, 130, 130, 2, 2, 64, true},
		{"full-d64-gqa", 1, 100, 170, 6, 2, 64, false},
		{"full-d128", 1, 64, 96, 2, 2, 128, false},
		{"dilated-d64-gqa", 1, 150, 150, 4, 2, 64, true},
		{"dilated-d128-block", 2, 100, 100, 4, 4, 128, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var dil ir.Attrs
			if strings.HasPrefix(c.name, "dilated") {
				dil = ir.A("segments", []int64{32, 64, 256}, "dilations", []int64{1, 2, 4}, "offsets", "paper")
				if strings.HasSuffix(c.name, "block") {
					dil = ir.A("segments", []int64{24, 48}, "dilations", []int64{1, 3}, "offsets", "block")
				}
			}
			f, in := attentionGraphOf(t, c.b, c.t, c.s, c.h, c.hkv, c.d, c.causal, uint64(c.t), dil)
			compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2)
			s := NewSession(dev, Options{Storage: tensor.BF16, Poison: true, CacheDir: t.TempDir()})
			defer s.Close()
			a, err := s.Run(f, in)
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.Run(f, in)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"dq", "dk", "dv"} {
				for i := range a[n].F {
					if math.Float64bits(a[n].F[i]) != math.Float64bits(b[n].F[i]) {
						t.Fatalf("%s differs between two runs at %d", n, i)
					}
				}
			}
		})
	}
}

// normalInputs returns fl: fl(name, shape...) adds an f32 input of that shape
// to bl, filled with standard normal values drawn from rng in element order,
// and records the values in in under name.
func normalInputs(bl *ir.Builder, rng *rand.Rand, in map[string]*tensor.Tensor) func(string, ...int64) *ir.Value {
	return func(name string, shape ...int64) *ir.Value {
		x := tensor.New(tensor.F32, shape...)
		for i := range x.F {
			x.F[i] = rng.NormFloat64()
		}
		in[name] = x
		return bl.Input(name, ir.T(tensor.F32, shape...))
	}
}

// docStartsOf is the doc starts [b, Σ lens] of documents of the given lengths,
// the same in each batch row.
func docStartsOf(b int64, lens []int64) *tensor.Tensor {
	var tl int64
	for _, l := range lens {
		tl += l
	}
	st := tensor.New(tensor.I64, b, tl)
	for r := range b {
		pos := int64(0)
		for _, l := range lens {
			for j := range l {
				st.I[r*tl+pos+j] = pos
			}
			pos += l
		}
	}
	return st
}

// docsGraph is causal attention and its gradient over packed documents of the
// given lengths (the same in each batch row), with the doc starts as an input.
func docsGraph(t *testing.T, b, h, hkv, d int64, lens []int64, seed uint64) (*ir.Func, map[string]*tensor.Tensor) {
	t.Helper()
	var tl int64
	for _, l := range lens {
		tl += l
	}
	rng := rand.New(rand.NewPCG(seed, 9))
	in := map[string]*tensor.Tensor{}
	bl := ir.NewBuilder("attn_docs")
	fl := normalInputs(bl, rng, in)
	q, k, v, do := fl("q", b, tl, h, d), fl("k", b, tl, hkv, d), fl("v", b, tl, hkv, d), fl("do", b, tl, h, d)
	in["starts"] = docStartsOf(b, lens)
	starts := bl.Input("starts", ir.T(tensor.I64, b, tl))
	attrs := ir.A("causal", true, "scale", 1/math.Sqrt(float64(d)), "docs", true)
	r := bl.Apply(ir.OpAttention, attrs, q, k, v, starts)
	g := bl.Apply(ir.OpAttentionGrad, attrs, q, k, v, r[0], r[1], do, starts)
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

// TestFlashDocsLowering: attention over packed documents lowers to the
// tensor-core kernels, which take the doc starts last; with f32 storage there is
// no kernel for it, and the error names the node and why flash did not take it.
func TestFlashDocsLowering(t *testing.T) {
	f, _ := docsGraph(t, 1, 2, 1, 64, []int64{30, 1, 69}, 1)
	p, err := codegen.Build(f, codegen.Options{Arch: "sm_90a", Storage: tensor.BF16})
	if err != nil {
		t.Fatal(err)
	}
	masked := 0
	for _, k := range p.Kernels {
		if k.Op == "attention.flash.fwd" || k.Op == "attention.flash.dkdvdq" {
			masked++
			if last := k.Params[len(k.Params)-1]; last.Name != "starts" {
				t.Errorf("%s: last parameter %q, want the doc starts", k.Op, last.Name)
			}
		}
	}
	if masked != 2 {
		t.Errorf("%d masking flash kernels, want the forward and the fused backward", masked)
	}
	// Dilated attention over packed documents has no GPU kernel: refused, naming the node.
	bl := ir.NewBuilder("dilated_docs")
	q := bl.Input("q", ir.T(tensor.F32, 1, 64, 2, 64))
	st := bl.Input("starts", ir.T(tensor.I64, 1, 64))
	bl.Output("o", bl.Apply(ir.OpDilatedAttention, ir.A("causal", true, "docs", true, "segments", []int64{16, 64},
		"dilations", []int64{1, 2}, "offsets", "paper"), q, q, q, st)[0])
	df, err := bl.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = codegen.Build(df, codegen.Options{Arch: "sm_90a", Storage: tensor.BF16})
	if err == nil || !strings.Contains(err.Error(), "dilated attention over packed documents") ||
		!strings.Contains(err.Error(), df.Body[0].Where()) {
		t.Errorf("dilated attention over packed documents: got %v, want the refusal naming the node", err)
	}
	// f32 storage runs the scalar kernels, which read the doc starts as their mask.
	p, err = codegen.Build(f, codegen.Options{Arch: "sm_90a", Storage: tensor.F32})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Attention {
		if c.Kernel != codegen.KernelScalar || !strings.Contains(c.Why, "bf16") {
			t.Errorf("f32 storage: choice %+v, want the scalar kernels with flash's reason", c)
		}
	}
}

// TestGPUFlashDocs runs packed-document attention through the executor (bf16,
// outputs poisoned) against the CPU interpreter: the kernels get the doc starts
// from the arena where the lowering put them.
func TestGPUFlashDocs(t *testing.T) {
	dev := devicetest.Open(t)
	f, in := docsGraph(t, 2, 4, 2, 128, []int64{1, 90, 200, 9, 300}, 3)
	compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2)
	f, in = docsGraph(t, 1, 8, 2, 64, []int64{257, 256, 1, 6}, 4)
	compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2)
	// fp32 storage: the scalar kernels with the doc starts as their mask.
	f, in = docsGraph(t, 1, 4, 2, 96, []int64{33, 1, 60}, 5)
	compare(t, dev, f, in, Options{}, 1e-4)
}

// TestFlashDilatedScratch: the dilated backward sums dK and dV before dQ, so the
// arena gives the dQ accumulator the memory of the dK one: two fp32 accumulators
// of the gradients' size, not three.
func TestFlashDilatedScratch(t *testing.T) {
	f, _ := attentionGraphOf(t, 1, 64, 64, 2, 2, 64, true, 1, ir.A("segments", []int64{16, 64}, "dilations", []int64{1, 2}))
	p, err := codegen.Build(f, codegen.Options{Arch: "sm_90", Storage: tensor.BF16})
	if err != nil {
		t.Fatal(err)
	}
	offs, _ := codegen.PlanArena(p.Plan)
	seen := map[int64]int{}
	n := 0
	for _, b := range p.Plan.Buffers {
		if b.Kind == "temp" && b.DType == "f32" && len(b.Shape) == 4 && b.Shape[3] == 64 {
			seen[offs[b.ID]]++
			n++
		}
	}
	// The forward's running output and the backward's three sums: four fp32
	// [B,T,H,D] temps in at most three places, one of them shared by dK and dQ.
	if n != 4 || len(seen) > 3 {
		t.Fatalf("%d fp32 accumulators at %d distinct offsets, want 4 at ≤ 3", n, len(seen))
	}
}
