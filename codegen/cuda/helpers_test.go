package cuda_test

import (
	"path/filepath"
	"sort"
	"testing"

	"github.com/lcc-dev/lcc/codegen/cuda/cudatest"
	"github.com/lcc-dev/lcc/driver/drivertest"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// trainingGraph loads a shared model with its backward pass.
func trainingGraph(t testing.TB, path string) *ir.Func {
	t.Helper()
	f, err := drivertest.TrainingGraph(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// zoo is the function that uses every kernel family, with random inputs.
func zoo(t testing.TB, seed uint64) (*ir.Func, map[string]*tensor.Tensor) {
	t.Helper()
	f, in, err := cudatest.Zoo(seed)
	if err != nil {
		t.Fatal(err)
	}
	return f, in
}

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
