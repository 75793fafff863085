package onnx

import (
	"strings"
	"testing"
)

// TestOpVersions: past opset 23, an op ONNX redefined is accepted only at versions
// lcc implements; unchanged ops are accepted at any supported opset.
func TestOpVersions(t *testing.T) {
	for _, tc := range []struct {
		op    string
		opset int64
		want  string // "" for accepted
	}{
		{"Relu", 28, ""},
		{"Cast", 28, ""},
		{"Attention", 23, ""},
		{"Attention", 25, ""},
		{"ReduceLogSumExp", 28, ""},
		{"TopK", 23, ""},
		{"TopK", 28, "op TopK at opset 28 is version 24, newer than lcc implements (up to 23)"},
		{"Swish", 24, "op Swish at opset 24 is version 24"},
	} {
		err := opVersionError(tc.op, tc.opset)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s at opset %d: %v, want %q", tc.op, tc.opset, err, tc.want)
		}
	}
}
