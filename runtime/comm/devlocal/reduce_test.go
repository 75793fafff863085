package devlocal

import (
	"github.com/lcc-dev/lcc/internal/gputest"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// TestReduceKernelsCompile compiles every reduction kernel (each dtype and op,
// 4 ranks) with NVRTC, as CI does without a GPU.
func TestReduceKernelsCompile(t *testing.T) {
	if _, err := cuda.NVRTCVersion(); err != nil {
		gputest.Skipf(t, "skipping: no NVRTC library: %v", err)
	}
	for dt := range reduceTypes {
		for red := range reduceOps {
			for _, n := range []int{4} {
				k, err := ReduceKernel(dt, red, n)
				if err != nil {
					t.Fatal(err)
				}
				if _, log, err := cuda.Compile(k.Source, k.Name+".cu", "compute_80", nil); err != nil {
					t.Errorf("%v %v %d ranks: %v\n%s\n%s", dt, red, n, err, log, k.Source)
				}
			}
		}
	}
	if _, err := ReduceKernel(tensor.Bool, cuda.Sum, 2); err == nil {
		t.Error("a bool reduction rendered")
	}
}

// TestReduceKernelDeterministic checks that the same request renders the same bytes.
func TestReduceKernelDeterministic(t *testing.T) {
	a, _ := ReduceKernel(tensor.BF16, cuda.Sum, 4)
	b, _ := ReduceKernel(tensor.BF16, cuda.Sum, 4)
	c, _ := ReduceKernel(tensor.BF16, cuda.Sum, 2)
	if a != b || a.Name == c.Name {
		t.Errorf("renders differ or collide: %s %s %s", a.Name, b.Name, c.Name)
	}
}
