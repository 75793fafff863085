package train

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
)

// offloadConfig is gpt_mini with per-layer checkpoints, offloaded or not.
func offloadConfig(t *testing.T, offload bool) Config {
	c := small(t, 4)
	c.Checkpoint = "layers"
	if offload {
		c.Checkpoint = "layers+offload"
	}
	return c
}

// TestOffloadCPU: the step with offload forced holds offload and prefetch ops
// (a program of its own), and trains to the same losses bit for bit on the CPU,
// where both ops are the identity.
func TestOffloadCPU(t *testing.T) {
	if countOps(step(t, offloadConfig(t, true)).Func, ir.OpOffload) == 0 {
		t.Fatal("layers+offload: no value offloaded")
	}
	want, got := run(t, offloadConfig(t, false)), run(t, offloadConfig(t, true))
	if !slices.Equal(got.Losses, want.Losses) || got.Program == want.Program {
		t.Errorf("offload: losses %v, program %s; without %v, %s", got.Losses, got.Program, want.Losses,
			want.Program)
	}
}

// TestGPUOffload trains gpt_mini on the GPU with per-layer checkpoints, with
// and without offload to pinned host memory, in fp32 and bf16, every buffer
// poisoned first (the host block too): the losses agree (bit for bit expected:
// the same kernels on the same values, the copies only move them; within fp32
// rounding required, in case a GEMM's tactic depends on its buffers' offsets),
// and the offloaded
// run moves the kept values across both ways each step.
func TestGPUOffload(t *testing.T) {
	dev := devicetest.Open(t)
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		t.Run(st.String(), func(t *testing.T) {
			var res [2]*Result
			for i, offload := range []bool{false, true} {
				c := offloadConfig(t, offload)
				if st == tensor.BF16 {
					c.Precision = "bf16"
				}
				meter, err := dev.StartPeakMeter(10 * time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				s := exec.NewSession(dev, exec.Options{Storage: st, Poison: true, CacheDir: t.TempDir()})
				c.Device, c.Session, c.Run, c.Memory = "cuda", s, s.Run, meter
				res[i], err = Train(c)
				meter.Stop()
				s.Close()
				if err != nil {
					t.Errorf("%s (offload %v): %v", c.Checkpoint, offload, err)
				}
			}
			base, off := res[0], res[1]
			if base == nil || off == nil {
				return
			}
			bitwise := slices.Equal(off.Losses, base.Losses)
			for i := range base.Losses {
				if e := math.Abs(off.Losses[i]-base.Losses[i]) / math.Abs(base.Losses[i]); !(e <= 1e-6) {
					t.Errorf("step %d: loss with offload %.9g, without %.9g (relative %.2g)", i+1,
						off.Losses[i], base.Losses[i], e)
				}
			}
			if off.HostBytes <= base.HostBytes {
				t.Errorf("host traffic %d bytes per step with offload, %d without", off.HostBytes, base.HostBytes)
			}
			// The host side: the plan counts the pinned block, the run measured
			// it (runtime/cuda's count) and holds it in its resident set.
			if off.PlannedHostPeakBytes <= base.PlannedHostPeakBytes || off.PinnedPeakBytes <= 0 ||
				off.HostHWMBytes < off.PinnedPeakBytes {
				t.Errorf("host: planned %d (without offload %d), pinned peak %d, VmHWM %d",
					off.PlannedHostPeakBytes, base.PlannedHostPeakBytes, off.PinnedPeakBytes, off.HostHWMBytes)
			}
			t.Logf("bitwise %v; losses %v; host traffic %d → %d bytes per step; planned peak %d → %d", bitwise, off.Losses,
				base.HostBytes, off.HostBytes, base.PlannedPeakBytes, off.PlannedPeakBytes)
		})
	}
}
