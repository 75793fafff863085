package onnx

import "testing"

// FuzzImport decodes arbitrary bytes and lowers whatever decodes to IR with small
// dims bound: the lowering must return a function or an error, never panic, and a
// function it returns must verify (Import verifies before returning).
func FuzzImport(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data, testdataDir, LoadOptions{Source: "fuzz.onnx"})
		if err != nil {
			return
		}
		// Bounded dims and folding keep one input's work small.
		_, _ = Import(m, ImportOptions{Dims: map[string]int64{"batch": 1, "seq": 4}, FoldLimit: 4096})
	})
}
