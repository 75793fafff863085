package cuda_test

import (
	"path/filepath"
	"sort"
	"testing"
)

// models lists the shared ONNX models.
func models(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("../../testdata/onnx/*.onnx")
	if err != nil || len(files) == 0 {
		t.Fatalf("no models in testdata/onnx: %v", err)
	}
	sort.Strings(files)
	return files
}
