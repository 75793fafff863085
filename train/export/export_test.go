package export

import (
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train"
	"github.com/lcc-dev/lcc/train/snapshot"
)

const gptMini = "../../testdata/onnx/gpt_mini.onnx"

// pytorchParams reads the parameter names PyTorch's state_dict has, straight
// from torch.export's graph signature in the file (not through lcc's importer).
func pytorchParams(t *testing.T, path string) []string {
	t.Helper()
	m, err := onnx.Load(path, onnx.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*[A-Za-z0-9_]+: PARAMETER target='([^']*)'`)
	var out []string
	for _, mm := range re.FindAllStringSubmatch(m.Graph.Metadata["pkg.torch.export.ExportedProgram.graph_signature"], -1) {
		out = append(out, mm[1])
	}
	sort.Strings(out)
	return out
}

// trained trains gpt_mini for 3 steps and returns the checkpoint folder.
func trained(t *testing.T) string {
	t.Helper()
	c := train.DefaultConfig()
	c.Model, c.Data = gptMini, "synthetic:copy"
	c.SeqLen, c.Batch, c.Steps, c.LR, c.Seed, c.Version = 16, 2, 3, 3e-3, 1, "test"
	c.CheckpointDir = t.TempDir()
	if _, err := train.Train(c); err != nil {
		t.Fatal(err)
	}
	return c.CheckpointDir
}

func same(a, b *tensor.Tensor) bool {
	if a.Numel() != b.Numel() || len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	for i := 0; i < a.Numel(); i++ {
		if math.Float64bits(a.Float(i)) != math.Float64bits(b.Float(i)) {
			return false
		}
	}
	return true
}

// TestRoundTrip exports a trained checkpoint of gpt_mini (whose export folds
// Linear weights into Wᵀ initializers and merges its LayerNorm parameters) and
// reads it back: the safetensors file holds exactly PyTorch's parameters, by
// the graph signature's names, with the trained values; the ONNX file imports to
// weights equal to the trained ones, every merged parameter apart.
func TestRoundTrip(t *testing.T) {
	dir := trained(t)
	ck, _, err := snapshot.Latest(dir, snapshot.Want{})
	if err != nil || ck == nil {
		t.Fatalf("checkpoint: %v", err)
	}
	out := filepath.Join(t.TempDir(), "model.safetensors")
	res, err := Run(dir, Options{Format: "safetensors", Out: out})
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	names := append([]string(nil), st.Names...)
	sort.Strings(names)
	want := pytorchParams(t, gptMini)
	if strings.Join(names, " ") != strings.Join(want, " ") || res.Tensors != len(want) {
		t.Fatalf("exported names\n %v\nPyTorch's parameters\n %v", names, want)
	}
	if st.Metadata["format"] != "pt" {
		t.Errorf("metadata %v, want format=pt", st.Metadata)
	}
	init, err := driver.Load(gptMini, driver.Bindings{SeqLen: 16, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, n := range names {
		if !same(st.Tensors[n], ck.Tensors[n]) {
			t.Errorf("%s: exported value differs from the checkpoint's", n)
		}
		if p := init.Param(n); p != nil && !same(p.Data, st.Tensors[n]) {
			changed++
		}
		// PyTorch's layout: a Linear weight is [out, in].
		if n == "blocks.0.qkv.weight" && !sameShape(st.Tensors[n].Shape, []int64{192, 64}) {
			t.Errorf("%s is %v, PyTorch holds [192 64]", n, st.Tensors[n].Shape)
		}
	}
	if changed < len(names)/2 {
		t.Errorf("only %d of %d exported tensors differ from the untrained model", changed, len(names))
	}

	// ONNX: the trained model, imported back.
	onx := filepath.Join(t.TempDir(), "model.onnx")
	if _, err := Run(dir, Options{Format: "onnx", Out: onx}); err != nil {
		t.Fatal(err)
	}
	back, err := driver.Load(onx, driver.Bindings{SeqLen: 16, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range back.Params {
		if p.Role != ir.RoleWeight || p.Frozen {
			continue
		}
		n++
		if w, ok := ck.Tensors[p.Name]; !ok || !same(p.Data, w) {
			t.Errorf("ONNX round trip: weight %s differs from the trained one (in checkpoint: %v)", p.Name, ok)
		}
	}
	if n != len(want) {
		t.Errorf("the exported ONNX imports to %d weights, want %d", n, len(want))
	}
	for _, note := range back.Notes {
		if strings.Contains(note, "merged") {
			t.Errorf("the exported ONNX still merges parameters: %s", note)
		}
	}
}

func sameShape(a, b []int64) bool { return tensor.ShapeString(a) == tensor.ShapeString(b) }

// TestFolded: a weight holding a folded transpose (no graph signature: the
// folded_from provenance) is written as the parameter, transposed back; frozen
// weights and optimizer state are left out; two weights for one name clash.
func TestFolded(t *testing.T) {
	wt := tensor.New(tensor.F32, 2, 3)
	for i := range wt.F {
		wt.F[i] = float64(i)
	}
	c := &snapshot.Checkpoint{Path: "ck.json", Tensors: map[string]*tensor.Tensor{
		"val_9": wt, "rope": tensor.New(tensor.F32, 4), "optim.m.val_9": wt, "b": tensor.New(tensor.F32, 3)},
		Meta: snapshot.Meta{Params: map[string]snapshot.Param{
			"val_9": {Name: "fc.weight", Transposed: true}, "rope": {Name: "rope", Frozen: true}}}}
	w, err := FromCheckpoint(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(w.Names, " ") != "b fc.weight" || len(w.Skipped) != 1 {
		t.Fatalf("names %v, skipped %v", w.Names, w.Skipped)
	}
	got := w.Tensors["fc.weight"]
	if !sameShape(got.Shape, []int64{3, 2}) || got.F[1] != 3 || got.F[2] != 1 {
		t.Errorf("fc.weight %v %v, want the transpose of val_9", got.Shape, got.F)
	}
	c.Meta.Params["b"] = snapshot.Param{Name: "fc.weight"}
	c.Meta.Params["val_9"] = snapshot.Param{Name: "fc.weight"}
	if _, err := FromCheckpoint(c); err == nil || !strings.Contains(err.Error(), `both stand for parameter "fc.weight"`) {
		t.Errorf("clash: %v", err)
	}
}
