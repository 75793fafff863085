package train

import (
	"math"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// TestFusedStepCompiles: lcc train --fuse=on compiles llama_mini's step with
// fused_elementwise nodes, under a hash of its own (no GPU needed).
func TestFusedStepCompiles(t *testing.T) {
	compiled := func(fuse string) *driver.Result {
		c := small(t, 1)
		c.Model, c.Fuse = llamaMini, fuse
		return step(t, c)
	}
	off, on := compiled("off"), compiled("on")
	if countOps(on.Func, ir.OpFusedElementwise) == 0 || countOps(off.Func, ir.OpFusedElementwise) != 0 {
		t.Errorf("fused_elementwise nodes: %d with --fuse=on, %d without",
			countOps(on.Func, ir.OpFusedElementwise), countOps(off.Func, ir.OpFusedElementwise))
	}
	if on.Hash == off.Hash {
		t.Errorf("--fuse=on and off share the program hash %s", on.Hash)
	}
}

// TestGPUFusedStep (issue 25) trains llama_mini for 40 steps on the GPU with
// --fuse=on and with --fuse=off: in fp32 every step's loss agrees within 1e-5
// relative (the fused kernels do the same fp32 operations), in bf16 within
// 1e-2 (a fused group keeps its intermediates in fp32 registers where the
// unfused kernels may store some in bf16).
func TestGPUFusedStep(t *testing.T) {
	forStorages(t, 40, func(t *testing.T, dev *cuda.Device, cache string, c Config, st tensor.DType) {
		tol := 1e-5
		if st == tensor.BF16 {
			tol = 1e-2
		}
		c.Fuse = "on"
		on := run(t, gpuConfig(t, dev, c, st, cache))
		c.Fuse = "off"
		off := run(t, gpuConfig(t, dev, c, st, cache))
		if len(on.Losses) != 40 || len(off.Losses) != 40 {
			t.Fatalf("%d and %d losses, want 40", len(on.Losses), len(off.Losses))
		}
		if on.Program == off.Program {
			t.Errorf("fused and unfused steps share the program hash %s", on.Program)
		}
		worst := 0.0
		for i, l := range off.Losses {
			e := math.Abs(on.Losses[i]-l) / math.Abs(l)
			if !(e <= tol) {
				t.Errorf("step %d: loss %.9g fused, %.9g unfused (relative %.3g > %.0e)", i+1,
					on.Losses[i], l, e, tol)
			}
			worst = max(worst, e)
		}
		t.Logf("losses %.6f..%.6f fused, %.6f..%.6f unfused; worst relative difference %.3g",
			on.Losses[0], on.Losses[39], off.Losses[0], off.Losses[39], worst)
	})
}
