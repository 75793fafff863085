package onnx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

// testdataDir holds copies of the shared test models (the project never reads
// ../shared at test time).
var testdataDir = filepath.Join("..", "..", "testdata", "onnx")

func testModels(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(testdataDir, "*.onnx"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no test models in %s (err %v)", testdataDir, err)
	}
	return paths
}

func TestLoadTestdata(t *testing.T) {
	for _, path := range testModels(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			m, err := Load(path, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Graph.Nodes) == 0 || len(m.Graph.Outputs) == 0 || len(m.Graph.Initializers) == 0 {
				t.Fatalf("empty model: %d nodes, %d outputs, %d initializers",
					len(m.Graph.Nodes), len(m.Graph.Outputs), len(m.Graph.Initializers))
			}
			if v := m.Opsets[""]; v < MinOpset || v > MaxOpset {
				t.Errorf("opset %d", v)
			}
			if len(m.Graph.InitializerNames) != len(m.Graph.Initializers) {
				t.Errorf("%d initializer names for %d initializers",
					len(m.Graph.InitializerNames), len(m.Graph.Initializers))
			}
			// Every graph input of these models is [batch, seq, ...].
			for _, in := range m.Graph.Inputs {
				if len(in.Dims) < 2 || in.Dims[0].Param != "batch" || in.Dims[1].Param != "seq" ||
					in.Dims[0].Known || in.Dims[1].Known {
					t.Errorf("input %s dims %v, want [batch, seq, ...]", in.Name, in.Dims)
				}
			}
			checkTopological(t, m)
			if len(m.OpsUsed()) == 0 {
				t.Error("OpsUsed is empty")
			}
		})
	}
}

// checkTopological asserts the package's ordering invariant.
func checkTopological(t *testing.T, m *Model) {
	t.Helper()
	avail := map[string]bool{"": true}
	for _, in := range m.Graph.Inputs {
		avail[in.Name] = true
	}
	for name := range m.Graph.Initializers {
		avail[name] = true
	}
	for i := range m.Graph.Nodes {
		n := &m.Graph.Nodes[i]
		for _, in := range n.Inputs {
			if !avail[in] {
				t.Fatalf("%v: input %q used before it is defined", n, in)
			}
		}
		for _, o := range n.Outputs {
			avail[o] = true
		}
	}
}

func TestModelDetails(t *testing.T) {
	m, err := Load(filepath.Join(testdataDir, "gpt_mini.onnx"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := m.Graph.Inputs[0]
	if in.Name != "input_ids" || in.DType != tensor.I64 || !in.HasShape {
		t.Errorf("input %+v", in)
	}
	if got := dimsString(in.Dims); got != "[batch,seq]" {
		t.Errorf("input dims %s", got)
	}
	if m.Opsets[""] != 18 {
		t.Errorf("opset %d, want 18", m.Opsets[""])
	}
	var ops []string
	for _, k := range m.OpsUsed() {
		ops = append(ops, k.OpType)
		if k.Domain != "" || k.Opset != 18 {
			t.Errorf("op key %+v", k)
		}
	}
	for _, want := range []string{"LayerNormalization", "MatMul", "Softmax", "Trilu", "Where", "Erf"} {
		if !strings.Contains(" "+strings.Join(ops, " ")+" ", " "+want+" ") {
			t.Errorf("OpsUsed %v lacks %s", ops, want)
		}
	}
	for i := 1; i < len(ops); i++ {
		if ops[i-1] >= ops[i] {
			t.Errorf("OpsUsed not sorted: %v", ops)
		}
	}

	op23, err := Load(filepath.Join(testdataDir, "llama_mini_op23.onnx"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if op23.Opsets[""] != 23 {
		t.Errorf("op23 opset %d", op23.Opsets[""])
	}
	found := false
	for _, k := range op23.OpsUsed() {
		found = found || k.OpType == "Attention"
	}
	if !found {
		t.Error("llama_mini_op23 has no Attention op")
	}
}

func dimsString(ds []Dim) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.String())
	}
	return "[" + strings.Join(s, ",") + "]"
}

// The external-data model holds the same weights as llama_mini.onnx.
func TestExternalDataMatchesInline(t *testing.T) {
	inline, err := Load(filepath.Join(testdataDir, "llama_mini.onnx"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ext, err := Load(filepath.Join(testdataDir, "llama_mini_extdata.onnx"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.Graph.Initializers) != len(inline.Graph.Initializers) {
		t.Fatalf("%d initializers, want %d", len(ext.Graph.Initializers), len(inline.Graph.Initializers))
	}
	for name, want := range inline.Graph.Initializers {
		got, ok := ext.Graph.Initializers[name]
		if !ok {
			t.Errorf("initializer %q missing", name)
			continue
		}
		if !tensor.Equal(got, want) {
			t.Errorf("initializer %q differs", name)
		}
	}
	// Decode without a folder must refuse the external data, not read anything.
	data, err := os.ReadFile(filepath.Join(testdataDir, "llama_mini_extdata.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(data, "", LoadOptions{}); err == nil || !strings.Contains(err.Error(), "no model folder") {
		t.Errorf("Decode without a folder: %v", err)
	}
}
