package passes

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/internal/llamagen"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// ropeModel is a one-layer Llama with RoPE of the given base over head dim 16
// (D/2 = 8 frequencies), 12 positions, deterministic random weights; folded
// replaces every node computed from constants alone by its value, as the ONNX
// importer folds the cos and sin tables of a short export.
func ropeModel(t *testing.T, base float64, fused, folded bool) *ir.Func {
	t.Helper()
	f, err := llamagen.Build(llamagen.Config{Dim: 32, Layers: 1, Heads: 2, FFN: 24, Vocab: 19, Batch: 1,
		SeqLen: 12, Fused: fused, RoPEBase: base})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(7))
	for _, p := range f.Params {
		if p.Role != ir.RoleWeight {
			continue
		}
		x := make([]float64, p.Value.Type.Numel())
		for i := range x {
			x[i] = 0.4 * rng.NormFloat64()
		}
		p.Data = tensor.FromFloats(tensor.F32, p.Value.Type.Shape, x)
	}
	if folded {
		foldConstants(t, f)
	}
	return f
}

// foldConstants evaluates every node whose arguments are all constants.
func foldConstants(t *testing.T, f *ir.Func) {
	t.Helper()
	for _, n := range f.Body {
		if n.Op == ir.OpConstant || len(n.Results) != 1 {
			continue
		}
		var args []*tensor.Tensor
		for _, a := range n.Args {
			if a.Def == nil || a.Def.Op != ir.OpConstant {
				args = nil
				break
			}
			args = append(args, a.Def.AttrTensor("value"))
		}
		if len(args) != len(n.Args) {
			continue
		}
		out, err := interp.EvalNode(n, args, interp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		n.Op, n.Args, n.Attrs = ir.OpConstant, nil, ir.A("value", out[0])
	}
	DeadCode(f)
}

func ropeLogits(t *testing.T, f *ir.Func) *tensor.Tensor {
	t.Helper()
	if err := ir.Verify(f); err != nil {
		t.Fatal(err)
	}
	ids := tensor.FromInts(tensor.I64, []int64{1, 12}, []int64{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8})
	out, err := interp.Run(f, map[string]*tensor.Tensor{"input_ids": ids, "labels": ids}, interp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return out["logits"]
}

// A model built with base 10000 and rewritten to 1e6 computes what the same
// model built with base 1e6 does, in both forms and both layouts.
func TestRescaleRoPETheta(t *testing.T) {
	for _, fused := range []bool{false, true} {
		for _, folded := range []bool{false, true} {
			f := ropeModel(t, 10000, fused, folded)
			before := ropeLogits(t, f)
			res, err := RescaleRoPE(f, RoPEConfig{Theta: 1e6})
			if err != nil {
				t.Fatal(err)
			}
			want := ropeLogits(t, ropeModel(t, 1e6, fused, folded))
			got := ropeLogits(t, f)
			form := map[bool]string{false: "frequencies", true: "tables"}[folded]
			if res.FoundBase != 10000 || res.Dim != 16 || res.Form != form || res.Theta != 1e6 || res.Tokens != 12 {
				t.Errorf("fused=%v folded=%v: found %+v", fused, folded, res)
			}
			if e := relErr(got, want); e > 1e-6 {
				t.Errorf("fused=%v folded=%v: rewritten vs built with 1e6: rel err %g", fused, folded, e)
			}
			if e := relErr(before, want); e < 1e-4 {
				t.Errorf("fused=%v folded=%v: the base hardly matters here (%g): the test shows nothing", fused, folded, e)
			}
		}
	}
}

// hfInvFreq is an independent float64 transcription of transformers'
// modeling_rope_utils.py for head dim d over T positions: the inverse
// frequencies and the attention factor.
func hfInvFreq(kind string, base float64, d int, factor, orig, low, high float64, T int) ([]float64, float64) {
	plain := func(b float64) []float64 {
		inv := make([]float64, d/2)
		for i := range inv {
			inv[i] = 1 / math.Pow(b, float64(2*i)/float64(d))
		}
		return inv
	}
	dd := float64(d)
	switch kind {
	case "linear":
		inv := plain(base)
		for i := range inv {
			inv[i] /= factor
		}
		return inv, 1
	case "ntk":
		return plain(base * math.Pow(factor, dd/(dd-2))), 1
	case "dynamic":
		seq := math.Max(float64(T), orig)
		return plain(base * math.Pow(factor*seq/orig-(factor-1), dd/(dd-2))), 1
	case "yarn":
		dimOf := func(rot float64) float64 { return dd * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(base)) }
		lo, hi := math.Max(math.Floor(dimOf(32)), 0), math.Min(math.Ceil(dimOf(1)), dd-1)
		if lo == hi {
			hi += 0.001
		}
		inv := plain(base)
		for i := range inv {
			ramp := math.Min(math.Max((float64(i)-lo)/(hi-lo), 0), 1)
			extrapolation := 1 - ramp
			inv[i] = inv[i]/factor*(1-extrapolation) + inv[i]*extrapolation
		}
		return inv, 0.1*math.Log(factor) + 1
	case "llama3":
		inv := plain(base)
		for i, f := range inv {
			wave := 2 * math.Pi / f
			switch {
			case wave < orig/high:
			case wave > orig/low:
				inv[i] = f / factor
			default:
				s := (orig/wave - low) / (high - low)
				inv[i] = (1-s)*f/factor + s*f
			}
		}
		return inv, 1
	}
	return plain(base), 1
}

// Each scaling kind writes transformers' frequencies (and YaRN's factor on cos
// and sin) in both forms: the cos and sin the rewritten graph computes are those
// of hfInvFreq, and the two forms give the same logits.
func TestRescaleRoPEScalingKinds(t *testing.T) {
	cases := []struct {
		flag                        string
		theta, factor, orig, lo, hi float64
	}{
		{"linear:4", 0, 4, 0, 0, 0},
		{"ntk:4", 0, 4, 0, 0, 0},
		{"dynamic:2,orig=4", 0, 2, 4, 0, 0},
		{"yarn:4,orig=3", 0, 4, 3, 0, 0},
		{"yarn:4,orig=2048", 0, 4, 2048, 0, 0}, // a ramp from frequency 2 to 6
		{"yarn:4", 500, 4, 3, 0, 0},            // orig defaults to 12 positions / 4
		{"llama3:8,low=1,high=4,orig=6", 0, 8, 6, 1, 4},
		{"llama3:8,low=1,high=4,orig=60", 1e6, 8, 60, 1, 4},
	}
	for _, c := range cases {
		sc, err := ParseRoPEScaling(c.flag)
		if err != nil {
			t.Fatal(err)
		}
		cfg := RoPEConfig{Theta: c.theta, Scaling: sc}
		kind, _, _ := strings.Cut(c.flag, ":")
		base := orDefault(c.theta, 10000)
		inv, attn := hfInvFreq(kind, base, 16, c.factor, c.orig, c.lo, c.hi, 12)
		var logits []*tensor.Tensor
		for _, folded := range []bool{false, true} {
			f := ropeModel(t, 10000, false, folded)
			res, err := RescaleRoPE(f, cfg)
			if err != nil {
				t.Fatalf("%s: %v", c.flag, err)
			}
			for i := range inv {
				if math.Abs(res.InvFreq[i]-inv[i]) > 2e-7*inv[i] {
					t.Errorf("%s: inv_freq[%d] = %g, transformers %g", c.flag, i, res.InvFreq[i], inv[i])
				}
			}
			if math.Abs(res.AttentionFactor-attn) > 1e-12 {
				t.Errorf("%s: attention factor %g, want %g", c.flag, res.AttentionFactor, attn)
			}
			checkCosSin(t, c.flag, f, inv, attn)
			logits = append(logits, ropeLogits(t, f))
		}
		if e := relErr(logits[0], logits[1]); e > 1e-6 {
			t.Errorf("%s: run-time and folded forms differ by %g", c.flag, e)
		}
	}
}

// checkCosSin runs f and compares every cos and sin value the attention reads
// ([T, 8]: llamagen's unfused layout) with attn·cos(p·inv) and attn·sin(p·inv).
func checkCosSin(t *testing.T, name string, f *ir.Func, inv []float64, attn float64) {
	t.Helper()
	ids := tensor.FromInts(tensor.I64, []int64{1, 12}, make([]int64, 12))
	vals, err := interp.RunValues(f, map[string]*tensor.Tensor{"input_ids": ids, "labels": ids}, interp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, n := range f.Body {
		if n.Op == ir.OpMul && n.Args[1].Type.Rank() == 0 {
			continue // YaRN's factor on cos or sin, not an operand of the rotation
		}
		for _, a := range n.Args {
			if n.Op != ir.OpMul || a.Type.Rank() != 2 || a.Type.Shape[1] != 8 || a.Type.Shape[0] != 12 {
				continue
			}
			isSin := a.Def.Op == ir.OpSin || a.Def.Op == ir.OpMul && a.Def.Args[0].Def.Op == ir.OpSin ||
				a.Def.Op == ir.OpConstant && vals[a].F[0] == 0
			x := vals[a]
			for k, v := range x.F {
				p, i := k/8, k%8
				want := attn * math.Cos(float64(p)*inv[i])
				if isSin {
					want = attn * math.Sin(float64(p)*inv[i])
				}
				if math.Abs(v-want) > 2e-6 {
					t.Fatalf("%s: %s of position %d, frequency %d: %g, want %g", name,
						map[bool]string{false: "cos", true: "sin"}[isSin], p, i, v, want)
				}
			}
			checked++
		}
	}
	if checked < 4 {
		t.Fatalf("%s: checked %d cos/sin operands, want 4 (q and k, cos and sin)", name, checked)
	}
}

// A model without RoPE, or with two different ones, is refused, saying what
// was looked for.
func TestRescaleRoPERefuses(t *testing.T) {
	b := ir.NewBuilder("g")
	x := b.Input("x", ir.T(tensor.F32, 4, 8))
	b.Output("y", b.Mul(x, b.Const(tensor.FromFloats(tensor.F32, []int64{1, 8}, []float64{1, .5, .25, .125, 1, 1, 1, 1}))))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = RescaleRoPE(f, RoPEConfig{Theta: 1e6})
	if err == nil || !strings.Contains(err.Error(), "--rope-theta=1e+06: found no rotary position embedding: "+
		"looked for a constant vector of D/2 inverse frequencies") {
		t.Fatalf("no RoPE: %v", err)
	}

	// Two RoPEs: head dim 16 at base 10000 and base 500.
	b = ir.NewBuilder("g")
	pos := b.Apply1(ir.OpRange, ir.A("start", 0.0, "delta", 1.0, "count", int64(6), "dtype", tensor.F32))
	for i, base := range []float64{10000, 500} {
		inv := make([]float64, 8)
		for j := range inv {
			inv[j] = math.Pow(base, -float64(2*j)/16)
		}
		ang := b.Mul(b.Reshape(pos, 6, 1), b.Const(tensor.FromFloats(tensor.F32, []int64{1, 8}, inv)))
		b.Output([]string{"c0", "c1"}[i], b.Unary(ir.OpCos, ang))
		b.Output([]string{"s0", "s1"}[i], b.Unary(ir.OpSin, ang))
	}
	if f, err = b.Build(); err != nil {
		t.Fatal(err)
	}
	_, err = RescaleRoPE(f, RoPEConfig{Scaling: RoPEScaling{Kind: "linear", Factor: 2}})
	if err == nil || !strings.Contains(err.Error(), "two different rotary embeddings, base 10000, rotary dim 16") ||
		!strings.Contains(err.Error(), "base 500, rotary dim 16") {
		t.Fatalf("two RoPEs: %v", err)
	}
}

// --rope-scaling parses into its config and prints back the same; bad values
// name the flag.
func TestParseRoPEScaling(t *testing.T) {
	for _, s := range []string{"none", "linear:4", "ntk:2.5", "dynamic:2,orig=2048", "yarn:4,orig=4096",
		"yarn:8", "llama3:8,low=1,high=4,orig=8192"} {
		c, err := ParseRoPEScaling(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if c.String() != s {
			t.Errorf("%s prints as %s", s, c.String())
		}
	}
	if c, _ := ParseRoPEScaling("llama3:8,orig=100"); c.Low != 1 || c.High != 4 {
		t.Errorf("llama3 defaults: %+v", c)
	}
	for s, want := range map[string]string{
		"cubic:2":               `no kind "cubic"`,
		"linear":                "the factor F must be a number >= 1",
		"linear:0.5":            "the factor F must be a number >= 1",
		"linear:2,orig=9":       `linear takes no "orig"`,
		"yarn:2,orig=x":         "orig=x: want a positive number",
		"llama3:8,low=4,high=2": "high=2 must exceed low=4",
	} {
		_, err := ParseRoPEScaling(s)
		if err == nil || !strings.Contains(err.Error(), "--rope-scaling \""+s+"\": "+want) {
			t.Errorf("%s: %v, want %q", s, err, want)
		}
	}
	if err := (RoPEConfig{Theta: 0.5}).Validate(); err == nil || !strings.Contains(err.Error(), "--rope-theta 0.5") {
		t.Errorf("theta 0.5: %v", err)
	}
}
