package train

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/runtime/exec"
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
	c.Device, c.Session, c.Run, c.Adopt, c.Memory, c.GPU = "cuda", s, s.Run, s.Adopt, meter, s.GPU()
	return c
}

// TestGPUTargetArch trains the head-dim-128 Llama in bf16 (its attention takes
// the tensor-core tiers) compiled for an A100 (--target=a100x1: tier-1
// attention, portable kernels) and for an H200 on this GPU: the session runs
// the program driver compiled, tier for tier, under the hash the run prints
// and lcc compile reports, whatever GPU it finds. With --recompile-for-device
// the A100's step is compiled again for this GPU's arch, and the run prints and
// runs the new hash. A program for another GPU's architecture is refused
// before it runs.
func TestGPUTargetArch(t *testing.T) {
	dev := devicetest.Open(t)
	gpu := exec.GPUOf(dev)
	for _, tc := range []struct {
		target    string
		recompile bool
	}{{"a100x1", false}, {"h200x1", false}, {"a100x1", true}} {
		t.Run(fmt.Sprintf("%s-recompile=%v", tc.target, tc.recompile), func(t *testing.T) {
			c := small(t, 2)
			c.Model, c.Precision, c.SeqLen, c.Batch = filepath.Join("..", "testdata", "hf",
				"hf_llama_gqa_d128_sdpa.onnx"), "bf16", 128, 1
			c.Target = mustLookup(t, tc.target)
			compiled := step(t, c) // what lcc compile reports for these flags
			if err := gpu.Runs(compiled.Program); err != nil && !tc.recompile {
				t.Skipf("%s's program does not run here: %v", tc.target, err)
			}
			c = gpuConfig(t, dev, c, tensor.BF16, t.TempDir())
			c.RecompileForDevice = tc.recompile
			var out bytes.Buffer
			c.Progress = &out
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
			if h := driver.ProgramHash(f, adopted); h != res.Program || !strings.Contains(out.String(),
				"program "+h+"\n") {
				t.Fatalf("ran %s, reported %s, printed\n%s", h, res.Program, out.String())
			}
			arch, tier := c.Target.Arch, flash.TierFor(c.Target.Arch)
			recompiled := tc.recompile && c.Target.Arch != gpu.CodegenArch
			if recompiled {
				arch, tier = gpu.CodegenArch, flash.TierFor(gpu.CodegenArch)
				want := fmt.Sprintf("recompiled for %s (%s): program %s (was %s for %s)\n", arch, gpu.Name,
					res.Program, compiled.Hash, tc.target)
				if res.Program == compiled.Hash || !strings.HasPrefix(out.String(), want) {
					t.Fatalf("printed\n%s\nwant first\n%s", out.String(), want)
				}
			} else if res.Program != compiled.Hash || strings.Contains(out.String(), "recompiled") {
				t.Fatalf("ran %s, lcc compile reports %s; printed\n%s", res.Program, compiled.Hash, out.String())
			}
			if adopted.Plan.Arch != arch {
				t.Fatalf("program arch %s, want %s", adopted.Plan.Arch, arch)
			}
			for _, k := range adopted.Kernels {
				if k.Arch != "" && k.Arch != arch {
					t.Errorf("kernel %s built for %s, want %s", k.Name, k.Arch, arch)
				}
			}
			if len(adopted.Attention) == 0 {
				t.Fatal("the step has no attention kernel")
			}
			for _, a := range adopted.Attention {
				if a.Kernel != cudagen.KernelFlash || a.Tier != tier {
					t.Errorf("attention node %d (%s): %s tier %d, want flash tier %d (%s)", a.Node, a.Op, a.Kernel,
						a.Tier, tier, a.Why)
				}
			}
			t.Logf("%d kernels, attention tier %d, program %s", len(adopted.Kernels), tier, res.Program)
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
	dev := devicetest.Open(t)
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
