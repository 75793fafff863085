package passes

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

var longnetSmall = DilateConfig{Segments: []int64{8, 16, 32}, Dilations: []int64{1, 2, 4},
	Offsets: "paper"}

// handBuiltMHA is attn_mha.onnx written directly with dilated attention: x →
// qkv linear → 4 heads of 8 → dilated_attention → output linear, using f's weights.
func handBuiltMHA(t *testing.T, f *ir.Func, cfg DilateConfig) *ir.Func {
	t.Helper()
	w := func(name string) *tensor.Tensor {
		p := f.Param(name)
		if p == nil || p.Data == nil {
			t.Fatalf("attn_mha has no weight %q", name)
		}
		return p.Data
	}
	x := f.Param("x").Value.Type
	bsz, seq := x.Shape[0], x.Shape[1]
	b := ir.NewBuilder("mha")
	in := b.Input("x", ir.T(tensor.F32, bsz, seq, 32))
	qkv := b.Add(b.MatMul(in, b.Weight("wqkv", w("qkv.weight")), false, true),
		b.Weight("bqkv", w("qkv.bias")))
	parts := b.Apply(ir.OpSplit, ir.A("axis", int64(2), "sizes", []int64{32, 32, 32}), qkv)
	var heads []*ir.Value
	for _, p := range parts[:3] {
		heads = append(heads, b.Reshape(p, bsz, seq, 4, 8))
	}
	o := b.Apply(ir.OpDilatedAttention, ir.A("segments", cfg.Segments, "dilations", cfg.Dilations,
		"offsets", cfg.Offsets, "causal", true, "scale", 0.35355338), heads...)[0]
	y := b.Add(b.MatMul(b.Reshape(o, bsz, seq, 32), b.Weight("wo", w("o.weight")), false, true),
		b.Weight("bo", w("o.bias")))
	b.Output("y", y)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDilateAttentionMHA(t *testing.T) {
	f := importModel(t, "attn_mha.onnx", map[string]int64{"batch": 2, "seq": 64})
	var layers []string
	cfg := longnetSmall
	cfg.Layers = &layers
	runPasses(t, f, MatchAttention(MatchConfig{RequireAttention: true}),
		DilateAttention(cfg))
	if countOps(f, ir.OpDilatedAttention) != 1 || countOps(f, ir.OpAttention) != 0 ||
		len(layers) != 1 {
		t.Fatalf("layers %v, IR:\n%s", layers, ir.Print(f))
	}
	refPath := filepath.Join("testdata", "attention", "attn_mha_dilated_paper.ref.safetensors")
	ref, err := safetensors.Read(refPath)
	if err != nil {
		t.Fatal(err)
	}
	x, err := ref.Get("x")
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*tensor.Tensor{"x": x}

	// The rewritten model against the same model written by hand.
	checkSame(t, handBuiltMHA(t, f, longnetSmall), f, in, 1e-6)

	// And against PyTorch's float64 brute force of docs/design.md §3 (stored in f32).
	want, err := ref.Get("out")
	if err != nil {
		t.Fatal(err)
	}
	got, err := interp.Run(f, in, interp.Options{Precision: tensor.F64})
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr(got[f.Outputs[0].Name], want); e > 1e-5 {
		t.Errorf("relative error %.3g against the PyTorch reference", e)
	}
}

// A segment longer than the sequence is one segment: with dilation 1 that is
// dense causal attention.
func TestDilateAttentionLongSegmentIsDense(t *testing.T) {
	f := importModel(t, "gpt_mini.onnx", map[string]int64{"batch": 2, "seq": 16})
	runPasses(t, f, MatchAttention(MatchConfig{}))
	dense := f.Clone()
	runPasses(t, f, DilateAttention(DilateConfig{Segments: []int64{1 << 20}, Dilations: []int64{1}}))
	if countOps(f, ir.OpDilatedAttention) != 2 {
		t.Fatalf("IR:\n%s", ir.Print(f))
	}
	checkSame(t, dense, f, randomInputs(f, 512, 2), 1e-9)
}

func TestDilateAttentionErrors(t *testing.T) {
	masked := `func @f(
    %0: f32[1,8,2,4] input "q",
    %1: bool[8,8] input "m",
) {
  %2, %3 = attention(%0, %0, %0, %1) {causal, scale=0.5} : f32[1,8,2,4], f32[1,2,8] loc("node_x")
  return %2 "y"
}
`
	dense := `func @f(
    %0: f32[1,8,2,4] input "q",
) {
  %1, %2 = attention(%0, %0, %0) {scale=0.5} : f32[1,8,2,4], f32[1,2,8] loc("node_y")
  return %1 "y"
}
`
	for _, tc := range []struct {
		name, ir string
		cfg      DilateConfig
		want     string
	}{
		{"lengths", dense, DilateConfig{Segments: []int64{8, 16}, Dilations: []int64{1}},
			"--segments 8,16 and --dilations 1 differ in length"},
		{"empty", dense, DilateConfig{}, "--segments is empty"},
		{"zero", dense, DilateConfig{Segments: []int64{8, 0}, Dilations: []int64{1, 2}},
			"--segments 8,0: segment lengths must be positive"},
		{"offsets", dense, DilateConfig{Segments: []int64{8}, Dilations: []int64{1}, Offsets: "odd"},
			`--dilated-offsets "odd": want paper or block`},
		{"mask", masked, longnetSmall,
			"layer node_x: attention has a mask; --attention=dilated needs causal attention without a mask"},
		{"noncausal", dense, longnetSmall, "layer node_y: attention is not causal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ir.Parse(tc.ir)
			if err != nil {
				t.Fatal(err)
			}
			before := ir.Print(f)
			_, err = Run(f, []Pass{DilateAttention(tc.cfg)}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if ir.Print(f) != before {
				t.Error("a failed dilate-attention changed the function")
			}
		})
	}
}

// A sliding-window layer is left as it is and recorded as skipped, with its
// window; the other layers are still rewritten.
func TestDilateAttentionSkipsWindows(t *testing.T) {
	f, err := ir.Parse(`func @f(
    %0: f32[1,8,2,4] input "q",
) {
  %1, %2 = attention(%0, %0, %0) {causal, scale=0.5, window=3} : f32[1,8,2,4], f32[1,2,8] loc("local")
  %3, %4 = attention(%1, %0, %0) {causal, scale=0.5} : f32[1,8,2,4], f32[1,2,8] loc("global")
  return %3 "y"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	var layers, skipped []string
	cfg := longnetSmall
	cfg.Layers, cfg.Skipped = &layers, &skipped
	runPasses(t, f, DilateAttention(cfg))
	if strings.Join(layers, ",") != "global" {
		t.Errorf("rewrote %v, want [global]", layers)
	}
	if want := "layer local: sliding window 3: already local"; strings.Join(skipped, ";") != want {
		t.Errorf("skipped %q, want %q", skipped, want)
	}
	if n := f.Body[0]; n.Op != ir.OpAttention || ir.Window(n) != 3 {
		t.Errorf("the local layer is now %s:\n%s", n.Op, ir.Print(f))
	}
}
