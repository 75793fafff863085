package train

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// llamaMini is the model of the host optimizer's tests.
const llamaMini = "../testdata/onnx/llama_mini.onnx"

// TestOptimizerStatePlanned: lcc train's auto keeps the state on the device
// while the step fits the budget and plans it in host memory when only that
// fits (a new program hash, the report saying so); with accumulation auto
// plans the device and host is refused.
func TestOptimizerStatePlanned(t *testing.T) {
	c := small(t, 2)
	c.Model = llamaMini
	roomy := step(t, c)
	if roomy.Report.Memory.OptimizerState != "" {
		t.Fatalf("auto with room planned the state on the %s", roomy.Report.Memory.OptimizerState)
	}
	m := roomy.Report.Memory
	c.MemoryBudget = m.PerGPUPeakBytes - m.OptimizerBytes
	tight := step(t, c)
	tm := tight.Report.Memory
	if tm.OptimizerState != "host" || tm.PerGPUPeakBytes > c.MemoryBudget || tight.Hash == roomy.Hash {
		t.Fatalf("auto under %d bytes: state %q, peak %d, hash %s (device plan's %s)", c.MemoryBudget,
			tm.OptimizerState, tm.PerGPUPeakBytes, tight.Hash, roomy.Hash)
	}
	var text bytes.Buffer
	tight.Report.WriteText(&text)
	if !strings.Contains(text.String(), "optimizer state: host") {
		t.Errorf("report:\n%s", text.String())
	}
	c.Accumulate, c.MemoryBudget = 2, 0
	if acc := step(t, c); acc.Report.Memory.OptimizerState != "" {
		t.Errorf("auto with --accumulate 2 planned the state on the %s", acc.Report.Memory.OptimizerState)
	}
	c.OptimizerState = "host"
	if _, err := Train(c); err == nil || !strings.Contains(err.Error(), "--optimizer-state=host with --accumulate") {
		t.Errorf("host with accumulation: %v", err)
	}
}

// TestGPUHostOptimizer is issue #26's done-when for the host optimizer:
// llama_mini trains 20 steps with AdamW's state on the device and in pinned
// host memory (the update on the CPU) to the same losses bit for bit, in fp32
// and bf16; the host run split by a checkpoint at step 10 and resumed goes on
// bit for bit, and so does that checkpoint resumed by the resident optimizer
// (the two hold one state layout).
func TestGPUHostOptimizer(t *testing.T) {
	forStorages(t, 20, func(t *testing.T, dev *cuda.Device, cache string, c Config, st tensor.DType) {
		c.Clip = 0.5
		c.OptimizerState = "device"
		resident := run(t, gpuConfig(t, dev, c, st, cache))
		c.OptimizerState, c.OptimizerUpdate = "host", "cpu"
		var out bytes.Buffer
		c.Progress = &out
		host := run(t, gpuConfig(t, dev, c, st, cache))
		if resident.OptimizerState != "device" || !strings.HasPrefix(host.OptimizerState, "host (CPU AdamW") {
			t.Fatalf("optimizer state: resident run %q, host run %q", resident.OptimizerState,
				host.OptimizerState)
		}
		if host.Program == resident.Program {
			t.Error("the host and resident runs have one program hash")
		}
		if !strings.Contains(out.String(), "optimizer state: host") || host.HostSplit == "" {
			t.Errorf("the host run did not report its state and split:\n%s", out.String())
		}
		if !sameBits(host.Losses, resident.Losses) {
			t.Fatalf("host optimizer's losses\n%v\nresident's\n%v", host.Losses, resident.Losses)
		}
		if host.PlannedPeakBytes >= resident.PlannedPeakBytes {
			t.Errorf("planned GPU peak: host %d, resident %d", host.PlannedPeakBytes, resident.PlannedPeakBytes)
		}
		t.Logf("losses %.6f..%.6f; last update: %s; planned peak %d -> %d, measured %d -> %d",
			host.Losses[0], host.Losses[19], host.HostSplit, resident.PlannedPeakBytes, host.PlannedPeakBytes,
			resident.MeasuredPeakBytes, host.MeasuredPeakBytes)

		// Stop at 10 with a checkpoint, resume with the host optimizer and,
		// from the same checkpoint, with the resident one.
		c.Progress = nil
		c.CheckpointDir, c.StopAt = t.TempDir(), 10
		first := run(t, gpuConfig(t, dev, c, st, cache))
		if len(first.Checkpoints) == 0 {
			t.Fatal("the host run wrote no checkpoint")
		}
		c.StopAt, c.Resume, c.Keep = 0, true, 0
		for _, state := range []string{"host", "device"} {
			rc := c
			rc.OptimizerState, rc.CheckpointDir = state, t.TempDir()
			copyCheckpoints(t, c.CheckpointDir, rc.CheckpointDir)
			second := run(t, gpuConfig(t, dev, rc, st, cache))
			if second.FirstStep != 10 {
				t.Fatalf("resumed with the %s optimizer at step %d, want 10", state, second.FirstStep)
			}
			if both := append(append([]float64{}, first.Losses...), second.Losses...); !sameBits(both,
				resident.Losses) {
				t.Errorf("resumed with the %s optimizer:\n%v\nstraight:\n%v", state, both, resident.Losses)
			}
		}
	})
}

// TestGPUStreamedOptimizer: llama_mini over 20 steps with the host optimizer's
// update on the GPU (--optimizer-update=gpu) gives the resident optimizer's
// losses bit for bit (the same AdamW kernel over the same state, streamed), a
// program of its own, and a resume from its checkpoint continues the same
// trajectory.
func TestGPUStreamedOptimizer(t *testing.T) {
	forStorages(t, 20, func(t *testing.T, dev *cuda.Device, cache string, c Config, st tensor.DType) {
		c.Clip = 0.5
		c.OptimizerState = "device"
		resident := run(t, gpuConfig(t, dev, c, st, cache))
		c.OptimizerState, c.OptimizerUpdate = "host", "gpu"
		var out bytes.Buffer
		c.Progress = &out
		streamed := run(t, gpuConfig(t, dev, c, st, cache))
		if !strings.HasPrefix(streamed.OptimizerState, "host (GPU AdamW") {
			t.Fatalf("optimizer state %q, want the GPU update", streamed.OptimizerState)
		}
		if streamed.Program == resident.Program {
			t.Error("the streamed and resident runs have one program hash")
		}
		if !sameBits(streamed.Losses, resident.Losses) {
			t.Fatalf("streamed optimizer's losses\n%v\nresident's\n%v", streamed.Losses, resident.Losses)
		}
		c.Progress = nil
		c.CheckpointDir, c.StopAt = t.TempDir(), 10
		first := run(t, gpuConfig(t, dev, c, st, cache))
		c.StopAt, c.Resume, c.Keep = 0, true, 0
		second := run(t, gpuConfig(t, dev, c, st, cache))
		if both := append(append([]float64{}, first.Losses...), second.Losses...); second.FirstStep != 10 ||
			!sameBits(both, resident.Losses) {
			t.Errorf("resumed at %d with the streamed optimizer:\n%v\nstraight:\n%v", second.FirstStep, both,
				resident.Losses)
		}
	})
}

// forStorages runs body as a subtest in fp32 and in bf16 storage on GPU 0, with
// a kernel cache the subtests share and llama_mini's config for steps steps in
// that precision.
func forStorages(t *testing.T, steps int, body func(t *testing.T, dev *cuda.Device, cache string, c Config,
	st tensor.DType)) {
	dev := devicetest.Open(t)
	cache := t.TempDir()
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		t.Run(map[tensor.DType]string{tensor.F32: "fp32", tensor.BF16: "bf16"}[st], func(t *testing.T) {
			c := small(t, steps)
			c.Model = llamaMini
			if st == tensor.BF16 {
				c.Precision = "bf16"
			}
			body(t, dev, cache, c, st)
		})
	}
}

// copyCheckpoints copies the checkpoint folder src (each checkpoint's manifest
// and tensor files) into the empty folder dst.
func copyCheckpoints(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}
