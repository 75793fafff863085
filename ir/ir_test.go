package ir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lcc-dev/lcc/tensor"
)

// buildBlock builds a small attention block with the Go API.
func buildBlock(t testing.TB) *Func {
	b := NewBuilder("block")
	x := b.Input("x", Type{DType: tensor.F32, Shape: []int64{2, 8, 16}, Labels: []string{"batch", "seq", ""}})
	wq := b.Weight("wq", tensor.New(tensor.F32, 16, 16))
	g := b.Weight("ln.g", tensor.New(tensor.F32, 16))
	h := b.LayerNorm(x, g, nil, 1e-5)
	q := b.MatMul(h, wq, false, true)
	q4 := b.Reshape(q, 2, 8, 4, 4)
	o, _ := b.Attention(q4, q4, q4, true, 0.5)
	y := b.Add(b.Reshape(o, 2, 8, 16), x)
	y = b.Apply1(OpGelu, A("tanh", true), y)
	parts := b.Apply(OpSplit, A("axis", -1, "sizes", []int{8, 8}), y)
	s := b.Mul(parts[0], b.Scalar(tensor.F32, 0.1))
	b.Output("y", s)
	b.Output("rest", parts[1])
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestOpTable(t *testing.T) {
	for _, op := range AllOps() {
		info := op.Info()
		if info.Name == "" || info.Infer == nil {
			t.Errorf("op %d has no name or Infer", op)
		}
	}
}

func TestPrintParseRoundTrip(t *testing.T) {
	f := buildBlock(t)
	s := Print(f)
	g, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, s)
	}
	if diff := cmp.Diff(s, Print(g)); diff != "" {
		t.Errorf("Print(Parse(s)) != s (-want +got):\n%s", diff)
	}
	if !strings.Contains(s, "f32[batch=2,seq=8,16] input \"x\"") {
		t.Errorf("labels not printed:\n%s", s)
	}
}

// TestTestdataRoundTrip checks Print(Parse(s)) == s for every .lcc file in testdata.
func TestTestdataRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.lcc")
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Parse(string(src))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if diff := cmp.Diff(string(src), Print(f)); diff != "" {
			t.Errorf("%s: Print(Parse(s)) != s:\n%s", file, diff)
		}
	}
}

func TestVerifyErrors(t *testing.T) {
	cases := map[string]string{
		"use before def":  "func @f(%0: f32[2] input \"x\",\n) {\n  %1 = add(%0, %2) : f32[2]\n  %2 = neg(%0) : f32[2]\n  return %1 \"y\"\n}\n",
		"wrong type":      "func @f(%0: f32[2] input \"x\",\n) {\n  %1 = neg(%0) : f32[3]\n  return %1 \"y\"\n}\n",
		"arity":           "func @f(%0: f32[2] input \"x\",\n) {\n  %1 = add(%0) : f32[2]\n  return %1 \"y\"\n}\n",
		"unknown op":      "func @f(%0: f32[2] input \"x\",\n) {\n  %1 = frob(%0) : f32[2]\n  return %1 \"y\"\n}\n",
		"defined twice":   "func @f(%0: f32[2] input \"x\",\n) {\n  %0 = neg(%0) : f32[2]\n  return %0 \"y\"\n}\n",
		"bad attr":        "func @f(%0: f32[2] input \"x\",\n) {\n  %1 = neg(%0) {axis=1} : f32[2]\n  return %1 \"y\"\n}\n",
		"overflow":        "func @f(%0: f32[4294967296,4294967296] input \"x\",\n) {\n  return %0 \"y\"\n}\n",
		"huge splat":      "func @f() {\n  %0 = constant() {value=f32[100000,100000]{splat 0.0}} : f32[100000,100000]\n  return %0 \"y\"\n}\n",
		"short constant":  "func @f() {\n  %0 = constant() {value=f32[3]{1.0, 2.0}} : f32[3]\n  return %0 \"y\"\n}\n",
		"trailing text":   "func @f() {\n  return\n}\nxyz",
		"unterminated":    "func @f(%0: f32[2] input \"x",
		"duplicate param": "func @f(%0: f32[2] input \"x\", %1: f32[2] input \"x\",\n) {\n  return %0 \"y\"\n}\n",
	}
	for name, src := range cases {
		if _, err := Parse(src); err == nil {
			t.Errorf("%s: Parse accepted bad input", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Print(buildBlock(f)))
	files, _ := filepath.Glob("testdata/*.lcc")
	for _, file := range files {
		src, _ := os.ReadFile(file)
		f.Add(string(src))
	}
	f.Fuzz(func(t *testing.T, src string) {
		fn, err := Parse(src)
		if err != nil {
			return
		}
		// Whatever parses must print and parse back to the same text.
		s := Print(fn)
		g, err := Parse(s)
		if err != nil {
			t.Fatalf("reparse failed: %v\n%s", err, s)
		}
		if s2 := Print(g); s2 != s {
			t.Fatalf("not a fixed point:\n%s\n---\n%s", s, s2)
		}
	})
}

// The exporter's provenance survives the text form: origins (transposed or not),
// merged sources, frozen weights, and the function's notes and remarks.
func TestProvenanceRoundTrip(t *testing.T) {
	src, err := os.ReadFile("testdata/provenance.lcc")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	type prov struct {
		Origin     string
		Transposed bool
		Frozen     bool
		Sources    []string
	}
	got := map[string]prov{}
	for _, p := range f.Params {
		got[p.Name] = prov{p.Origin, p.OriginTransposed, p.Frozen, p.Sources}
	}
	want := map[string]prov{
		"input_ids":    {},
		"val_9":        {Origin: "lm_head.weight", Transposed: true},
		"embed.weight": {Sources: []string{"p_embed_weight", "p_lm_head_weight"}},
		"ln.bias":      {Origin: "ln.bias.0", Frozen: true},
		"ln.weight":    {Frozen: true, Sources: []string{"p_ln_weight"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parameters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{`the exporter folded "pos.weight" into a constant`}, f.Notes); diff != "" {
		t.Errorf("notes: %s", diff)
	}
	if diff := cmp.Diff([]string{"untied lm_head.weight from embed.weight"}, f.Remarks); diff != "" {
		t.Errorf("remarks: %s", diff)
	}
	// Clone keeps all of it.
	if Print(f.Clone()) != string(src) {
		t.Errorf("Clone loses provenance:\n%s", Print(f.Clone()))
	}
}

func TestProvenanceParseErrors(t *testing.T) {
	head := "func @f(\n    %0: f32[2] weight \"w\""
	for _, c := range []struct{ src, want string }{
		{head + " sources [],\n) {\n  return\n}\n", "expected a quoted string"},
		{head + " sources [\"a\" \"b\"],\n) {\n  return\n}\n", `expected ","`},
		{head + ",\n) attributes {comments=[\"x\"]} {\n  return\n}\n", `unknown function attribute "comments"`},
		{head + ",\n) attributes {notes=[\"x\"], notes=[\"y\"]} {\n  return\n}\n", "function attribute notes given twice"},
		{head + ",\n) attributes {notes=\"x\"} {\n  return\n}\n", `expected "["`},
	} {
		if _, err := Parse(c.src); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q): %v, want %q", c.src, err, c.want)
		}
	}
}
