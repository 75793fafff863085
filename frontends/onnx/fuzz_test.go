package onnx

import (
	"os"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode, which must return a model or an
// error and never panic. The seeds are the test models; external data resolves
// against testdata/onnx, so the fuzzer also exercises the location checks (it
// can only read files there). Crashers found are kept under testdata/fuzz.
func FuzzDecode(f *testing.F) {
	for _, path := range testModels(f) {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(marshal(f, tinyModel()))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data, testdataDir, LoadOptions{Source: "fuzz.onnx"})
		if err != nil {
			return
		}
		// A model that decodes must satisfy the package invariants.
		checkTopological(t, m)
		_ = m.OpsUsed()
	})
}
