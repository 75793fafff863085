package driver

import (
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// TestWarningsUnreadInput: an input nothing reads is reported (PyTorch's exporter
// aliases two equal example inputs and reads one of them twice), after the
// importer's own findings.
func TestWarningsUnreadInput(t *testing.T) {
	b := ir.NewBuilder("f")
	ids := b.Input("input_ids", ir.T(tensor.I64, 2, 3))
	b.Label("labels", ir.T(tensor.I64, 2, 3))
	b.Output("y", b.Cast(ids, tensor.F32))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	f.Notes = []string{"folded"}
	w := Warnings(f)
	if len(w) != 2 || w[0] != "folded" || !strings.Contains(w[1], `input "labels" is never read`) {
		t.Errorf("warnings %q", w)
	}
}
