package cuda_test

import (
	"errors"
	"github.com/lcc-dev/lcc/internal/gputest"
	"slices"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	rcuda "github.com/lcc-dev/lcc/runtime/cuda"
)

// TestOptimKernelsCompile compiles the optimizer kernels of every storage pair
// with NVRTC (11.8 here, 13 on the device) and checks the chunk table; the GPU
// test of their arithmetic against train/optim is runtime/exec's
// TestGPUOptimizerMatchesCPU.
func TestOptimKernelsCompile(t *testing.T) {
	if _, err := codegen.OptimKernel("f16", "f32"); err == nil {
		t.Error("OptimKernel accepted f16 gradients")
	}
	ck, cs, cl := codegen.OptimChunks([]int64{3, 2*codegen.OptimChunk + 1, 0, codegen.OptimChunk})
	if !slices.Equal(ck, []int32{0, 1, 1, 1, 3}) || !slices.Equal(cs, []int64{0, 0, codegen.OptimChunk,
		2 * codegen.OptimChunk, 0}) || !slices.Equal(cl, []int32{3, codegen.OptimChunk, codegen.OptimChunk, 1,
		codegen.OptimChunk}) {
		t.Errorf("OptimChunks: %v %v %v", ck, cs, cl)
	}
	_, err := rcuda.NVRTCVersion()
	if errors.Is(err, rcuda.ErrUnavailable) {
		gputest.Skipf(t, "skipping the compile: no NVRTC library could be loaded: %v", err)
	}
	for _, g := range []string{"f32", "bf16"} {
		for _, w := range []string{"f32", "bf16"} {
			k, err := codegen.OptimKernel(g, w)
			if err != nil {
				t.Fatal(err)
			}
			if _, log, err := rcuda.Compile(k.Source, k.Name+".cu", "compute_80", nil); err != nil {
				t.Errorf("%s: %v\n%s", k.Name, err, log)
			}
		}
	}
}
