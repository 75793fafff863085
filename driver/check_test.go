package driver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

// TestToleranceFloor: a bf16 or f16 reference is held to two units of its own
// rounding when the check's tolerance is tighter; f32 references are not.
func TestToleranceFloor(t *testing.T) {
	ref := func(dt tensor.DType) *tensor.Tensor {
		r := tensor.New(dt, 4)
		copy(r.F, []float64{1, 2, 3, 4})
		return r
	}
	// a is off by 0.3% of ‖ref‖: beyond 1e-4, within bf16's floor, beyond f16's.
	a := tensor.New(tensor.F32, 4)
	copy(a.F, []float64{1, 2, 3, 4.0164})
	for _, tc := range []struct {
		dt   tensor.DType
		pass bool
	}{{tensor.BF16, true}, {tensor.F16, false}, {tensor.F32, false}} {
		c, err := Compare("y", a, ref(tc.dt))
		if err != nil {
			t.Fatal(err)
		}
		r := &CheckResult{Comparisons: []Comparison{c}}
		err = r.Print(CheckOptions{Tolerance: 1e-4, Out: &bytes.Buffer{}})
		if (err == nil) != tc.pass || (err != nil && !errors.Is(err, ErrTolerance)) {
			t.Errorf("%v reference, rel_err %.2e: got %v, want pass=%v", tc.dt, c.RelErr, err, tc.pass)
		}
	}
	// A looser check tolerance still applies.
	c, _ := Compare("y", a, ref(tensor.F32))
	if err := (&CheckResult{Comparisons: []Comparison{c}}).Print(CheckOptions{Tolerance: 1e-2, Out: &bytes.Buffer{}}); err != nil {
		t.Error(err)
	}
}

// TestCompareShape: a result with another element count is an ErrShape.
func TestCompareShape(t *testing.T) {
	_, err := Compare("y", tensor.New(tensor.F32, 3), tensor.New(tensor.F32, 4))
	if !errors.Is(err, ErrShape) {
		t.Errorf("got %v, want ErrShape", err)
	}
}

// TestReadRefUnknownDType: a safetensors file with a dtype lcc has no type for is
// refused by naming the tensor and dtype, not as "not a safetensors file".
func TestReadRefUnknownDType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ref.safetensors")
	h := `{"x":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}}`
	data := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	data = append(append(data, h...), 0, 0, 0, 0)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := ReadRef(path)
	if err == nil || strings.Contains(err.Error(), "not a safetensors file") ||
		!strings.Contains(err.Error(), `tensor "x": unknown dtype "U16"`) {
		t.Errorf("got %v", err)
	}
}
