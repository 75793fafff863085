package train

import (
	"math"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/gputest"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// gpuConfig is c on GPU 0 with its state resident in a fresh session with
// storage st and kernel cache cache, and a peak-memory meter started before
// the session.
func gpuConfig(t *testing.T, dev *cuda.Device, c Config, st tensor.DType, cache string) Config {
	t.Helper()
	meter, err := dev.StartPeakMeter(10 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := exec.NewSession(dev, exec.Options{Storage: st, CacheDir: cache})
	t.Cleanup(func() {
		meter.Stop()
		s.Close()
	})
	c.Device, c.Session, c.Run, c.Adopt, c.Memory = "cuda", s, s.Run, s.Adopt, meter
	return c
}

// TestGPUTargetArch trains gpt_mini compiled for an A100 (--target=a100x1: tier-1
// attention, portable kernels) and for an H200 on this GPU: the session runs the
// program driver compiled, under the hash the run reports, whatever GPU it finds,
// and a program for another GPU's architecture is refused before it runs.
func TestGPUTargetArch(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	defer dev.Close()
	for _, name := range []string{"a100x1", "h200x1"} {
		t.Run(name, func(t *testing.T) {
			c := small(t, 2)
			if c.Target, err = targets.Lookup(name); err != nil {
				t.Fatal(err)
			}
			c = gpuConfig(t, dev, c, tensor.F32, t.TempDir())
			var f *ir.Func
			var adopted *cudagen.Program
			adopt := c.Adopt
			c.Adopt = func(g *ir.Func, p *cudagen.Program) error { f, adopted = g, p; return adopt(g, p) }
			res := run(t, c)
			if adopted == nil {
				t.Fatal("the step's program was not handed to the session")
			}
			if got := c.Session.ProgramOf(f); got != adopted {
				t.Fatal("the session ran another program than the one compiled")
			}
			if h := driver.ProgramHash(f, adopted); h != res.Program {
				t.Fatalf("ran %s, reported %s", h, res.Program)
			}
			if adopted.Plan.Arch != c.Target.Arch {
				t.Fatalf("program arch %s, target %s", adopted.Plan.Arch, c.Target.Arch)
			}
			for _, k := range adopted.Kernels {
				if k.Arch != "" && k.Arch != c.Target.Arch {
					t.Errorf("kernel %s built for %s on target %s", k.Name, k.Arch, c.Target.Arch)
				}
			}
			t.Logf("%s: %d kernels, program %s", name, len(adopted.Kernels), res.Program)
		})
	}
	s := exec.NewSession(dev, exec.Options{})
	defer s.Close()
	foreign := &cudagen.Program{Plan: &cudagen.LaunchPlan{Arch: "sm_100a", Storage: "f32"},
		Kernels: []cudagen.Kernel{{Name: "k", Arch: "sm_100a"}}}
	if err := s.Adopt(&ir.Func{Name: "f"}, foreign); err == nil {
		t.Fatal("a program for sm_100a was adopted on", dev.Name())
	}
}

// TestGPUResident trains gpt_mini on the GPU with its state resident (plain,
// with accumulation and clipping, and split by a checkpoint and a resume) and
// wants the CPU's losses within 1e-4 relative in fp32 (3e-2 in bf16), at most
// the token batch plus 64 bytes between host and device per step, and a
// measured peak.
func TestGPUResident(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	defer dev.Close()
	cache := t.TempDir()
	for _, tc := range []struct {
		name       string
		accumulate int
		clip       float64
		st         tensor.DType
		tol        float64
	}{
		{"fp32", 1, 1, tensor.F32, 1e-4},
		{"fp32-accumulate-clip", 2, 0.05, tensor.F32, 1e-4},
		{"bf16", 1, 1, tensor.BF16, 3e-2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := small(t, 6)
			c.Accumulate, c.Clip = tc.accumulate, tc.clip
			want := run(t, c)
			if tc.st == tensor.BF16 {
				c.Precision = "bf16"
			}
			got := run(t, gpuConfig(t, dev, c, tc.st, cache))
			if !got.Resident {
				t.Fatal("the training state did not stay on the GPU")
			}
			for i := range want.Losses {
				if e := math.Abs(got.Losses[i]-want.Losses[i]) / math.Abs(want.Losses[i]); !(e <= tc.tol) {
					t.Errorf("step %d: GPU loss %.7g, CPU %.7g (relative %.2g > %g)", i+1, got.Losses[i],
						want.Losses[i], e, tc.tol)
				}
			}
			batch := int64(c.Accumulate * c.Batch * c.SeqLen * 8 * 2) // i64 ids and labels
			if got.BatchBytes != batch || got.HostBytes > batch+64 || got.HostBytes < batch {
				t.Errorf("host traffic %d bytes per step, batch %d (want %d): want batch ≤ traffic ≤ batch+64",
					got.HostBytes, got.BatchBytes, batch)
			}
			if got.MeasuredPeakBytes <= 0 {
				t.Errorf("measured peak %d bytes", got.MeasuredPeakBytes)
			}
			t.Logf("losses %.5f..%.5f, %d bytes per step, measured peak %d, planned %d", got.Losses[0],
				got.Losses[len(got.Losses)-1], got.HostBytes, got.MeasuredPeakBytes, got.PlannedPeakBytes)
		})
	}

	// A checkpoint pulls the device state; a resume loads it back: the same
	// losses as a straight run.
	c := small(t, 6)
	straight := run(t, gpuConfig(t, dev, c, tensor.F32, cache))
	c.CheckpointDir, c.StopAt = t.TempDir(), 3
	first := run(t, gpuConfig(t, dev, c, tensor.F32, cache))
	c.StopAt, c.Resume = 0, true
	second := run(t, gpuConfig(t, dev, c, tensor.F32, cache))
	both := append(first.Losses, second.Losses...)
	for i := range straight.Losses {
		if e := math.Abs(both[i] - straight.Losses[i]); !(e <= 1e-6*math.Abs(straight.Losses[i])) {
			t.Errorf("step %d: resumed run %.8g, straight %.8g", i+1, both[i], straight.Losses[i])
		}
	}
}
