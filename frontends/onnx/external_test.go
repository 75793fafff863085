package onnx

import (
	"testing"

	"github.com/lcc-dev/lcc/internal/onnxgen"
)

// TestExternalChunks: external data read a chunk at a time (extChunk) gives
// every element of a tensor that spans several chunks and ends inside one,
// and of the tensor after it in the same file.
func TestExternalChunks(t *testing.T) {
	n := int64(2*extChunk/4 + 3) // f32 elements: two whole chunks and 12 bytes
	g := onnxgen.New("chunks")
	g.Input("x", 1)
	g.Weight("big", []int64{n}, 1, -2, 3.5, 0.25, 5)
	g.Weight("after", []int64{3}, 7, 8, 9)
	g.Node("Add", nil, "x", "after")
	g.Rename("y")
	g.Output("y", 3)
	path, err := g.WriteExternal(t.TempDir(), "m.onnx")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(path, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vals := []float64{1, -2, 3.5, 0.25, 5}
	big := m.Graph.Initializers["big"]
	for i, x := range big.F {
		if x != vals[i%len(vals)] {
			t.Fatalf("big[%d] = %v, want %v (of %d elements)", i, x, vals[i%len(vals)], len(big.F))
		}
	}
	if a := m.Graph.Initializers["after"].F; len(a) != 3 || a[0] != 7 || a[2] != 9 {
		t.Errorf("after = %v", a)
	}
}
