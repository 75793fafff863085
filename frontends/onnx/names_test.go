package onnx

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// TestONNXColumn: every IR op with an ONNX name in the op table imports from that
// ONNX op and exports under it, and the export of an op without one goes to lcc's
// domain.
func TestONNXColumn(t *testing.T) {
	n := 0
	for _, op := range ir.AllOps() {
		name := op.Info().ONNX
		if name == "" {
			continue
		}
		n++
		if lowerings[name] == nil {
			t.Errorf("op %s: ONNX %s has no lowering", op, name)
		}
	}
	if n < 30 {
		t.Errorf("only %d ops have ONNX names", n)
	}
	b := ir.NewBuilder("f")
	x := b.Input("x", ir.T(tensor.F32, 2, 3))
	b.Output("y", b.Unary(ir.OpTanh, b.Unary(ir.OpSilu, x)))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	data, err := Export(f)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(data, "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, node := range m.Graph.Nodes {
		got[node.OpType] = node.Domain
	}
	if d, ok := got["Tanh"]; !ok || d != "" {
		t.Errorf("tanh exported as %v", got)
	}
	if d, ok := got["silu"]; !ok || d != LCCDomain {
		t.Errorf("silu exported as %v", got)
	}
}
