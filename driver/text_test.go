package driver_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// provenance is what a function carries besides its structure and weights.
type provenance struct {
	Notes, Remarks []string
	Params         map[string]string
}

func provenanceOf(f *ir.Func) provenance {
	p := provenance{Notes: f.Notes, Remarks: f.Remarks, Params: map[string]string{}}
	for _, q := range f.Params {
		p.Params[q.Name] = strings.Join([]string{q.Role.String(), q.Origin,
			map[bool]string{true: "transposed"}[q.OriginTransposed],
			map[bool]string{true: "frozen"}[q.Frozen], strings.Join(q.Sources, ",")}, "|")
	}
	return p
}

// Every shared model (the repository's ONNX models and the Hugging Face
// exports), imported and compiled for a training step: its IR prints, parses back
// and prints the same bytes with the same provenance; `compile -o` writes what
// driver.Load reads back as the same function with the same weights.
func TestTextFormRoundTripModels(t *testing.T) {
	var models []string
	for _, dir := range []string{"onnx", "hf"} {
		m, _ := filepath.Glob(filepath.Join("..", "testdata", dir, "*.onnx"))
		models = append(models, m...)
	}
	if len(models) < 10 {
		t.Fatalf("found %d models", len(models))
	}
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	// No shared model has a folded weight (Origin); ir/testdata/provenance.lcc
	// covers origins.
	sawSources := false
	for _, path := range models {
		name := filepath.Base(path)
		if strings.Contains(name, "_long") {
			continue // the same graphs as their short exports, at 4,104 tokens
		}
		t.Run(name, func(t *testing.T) {
			f, err := driver.Load(path, driver.Bindings{SeqLen: 8, Batch: 2})
			if err != nil {
				t.Fatal(err)
			}
			opts := driver.CompileOptions{Target: tg, Model: name}
			res, err := driver.Compile(f, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range []*ir.Func{f, res.Func} {
				s := ir.Print(g)
				back, err := ir.Parse(s)
				if err != nil {
					t.Fatalf("Parse(Print(f)): %v", err)
				}
				if got := ir.Print(back); got != s {
					t.Fatalf("Print(Parse(s)) != s:\n%s", cmp.Diff(s, got))
				}
				if diff := cmp.Diff(provenanceOf(g), provenanceOf(back)); diff != "" {
					t.Errorf("provenance lost in the text form (-want +got):\n%s", diff)
				}
			}
			for _, p := range res.Func.Params {
				sawSources = sawSources || len(p.Sources) > 0
			}

			dir := t.TempDir()
			if err := driver.WriteOutputs(dir, res); err != nil {
				t.Fatal(err)
			}
			g, err := driver.Load(filepath.Join(dir, "graph.lcc"), driver.Bindings{})
			if err != nil {
				t.Fatal(err)
			}
			if ir.Print(g) != ir.Print(res.Func) {
				t.Errorf("graph.lcc loads back as another function")
			}
			if diff := cmp.Diff(provenanceOf(res.Func), provenanceOf(g)); diff != "" {
				t.Errorf("provenance lost by compile -o (-want +got):\n%s", diff)
			}
			for i, p := range res.Func.Params {
				q := g.Params[i]
				if (p.Data == nil) != (q.Data == nil) || p.Data != nil && !tensor.Equal(p.Data, q.Data) {
					t.Errorf("weight %s differs after compile -o and load", p.Name)
				}
			}
		})
	}
	if !sawSources {
		t.Error("no model had sources: the test checks too little")
	}
}
