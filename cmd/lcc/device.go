package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
)

// deviceFlags select where run and check execute.
type deviceFlags struct {
	device, precision string
	// attentionKernels is check's --attention-kernels: "auto" or "scalar".
	attentionKernels string
	// hostBudget is --host-memory-budget (0: the host's available memory).
	hostBudget byteSize
}

// add registers --device and --precision, which choose where a run executes and
// how its float values are stored there.
func (d *deviceFlags) add(cmd *cobra.Command) {
	// cpu and fp32 by default: the reference interpreter in full precision, the
	// numbers every GPU and bf16 run is checked against.
	cmd.Flags().StringVar(&d.device, "device", "cpu", "where to run: cpu (reference interpreter) or cuda (GPU 0)")
	cmd.Flags().StringVar(&d.precision, "precision", "fp32",
		"storage precision: fp32, or bf16 (bf16 storage, fp32 math and accumulation; on the CPU, emulated)")
	addHostBudget(cmd, &d.hostBudget)
}

// addHostBudget adds --host-memory-budget, which bounds a CPU run's host memory
// and a GPU step's planned host peak. A function of its own, not part of
// deviceFlags.add: compile and train take the flag without --device's set.
func addHostBudget(cmd *cobra.Command, b *byteSize) {
	cmd.Flags().Var(b, "host-memory-budget", "host memory a --device=cpu run may hold at its peak, "+
		"e.g. 8GiB (default: what the host has available, or its cgroup's limit if smaller); "+
		"a run whose estimated peak passes it is refused before it starts. For a GPU target (lcc compile, "+
		"lcc train --device=cuda) it bounds the planned host peak (the model as lcc holds it, pinned "+
		"offload and checkpoint buffers): checkpointing offloads within it; default: no bound at plan "+
		"time, and lcc train checks the measured host limits before allocating")
}

// runner returns the driver.Runner for the flags and a function that releases the
// device (for cuda, the runner's exec.Session and then the device). A missing GPU
// or driver is an error, not a panic.
func (d *deviceFlags) runner() (driver.Runner, func(), error) {
	run, _, release, err := d.runnerWithPrograms()
	// Callers that need no program hook get the two-value form.
	return run, release, err
}

// runnerWithPrograms is runner, with the program the device ran for each
// function (nil on the CPU), which check's emulation of bf16 storage follows
// (driver.CheckOptions.Program).
func (d *deviceFlags) runnerWithPrograms() (driver.Runner, func(*ir.Func) *codegen.Program, func(), error) {
	storage, err := d.storage()
	if err != nil {
		return nil, nil, nil, err
	}
	switch d.device {
	case "cpu":
		// --precision=bf16 on the CPU rounds what the GPU stores in bf16. The CPU holds
		// nothing to release and compiles no program for check to follow.
		return func(f *ir.Func, in map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
			return driver.RunCPU(f, in, storage, driver.NewHostBudget(int64(d.hostBudget)))
		}, nil, func() {}, nil
	case "cuda":
		dev, err := cuda.Open(0)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--device=cuda: %w", err)
		}
		// One session for the command: a training loop runs the same functions every
		// step and so builds, loads and allocates each of them once.
		// --attention-kernels=scalar swaps the tensor-core attention kernels for the
		// CUDA-core ones, to tell a tensor-core kernel fault from a model fault.
		s := exec.NewSession(dev, exec.Options{Storage: storage, ScalarAttention: d.attentionKernels == "scalar"})
		return s.Run, s.ProgramOf, func() {
			s.Close()
			dev.Close()
		}, nil
	}
	return nil, nil, nil, fmt.Errorf("--device %q: want cpu or cuda", d.device)
}

// session opens GPU 0 and starts a peak-memory meter there, then a session with
// the flags' storage (timing launches by family with profile); release closes
// them in reverse order.
func (d *deviceFlags) session(profile bool) (*exec.Session, *cuda.PeakMeter, func(), error) {
	storage, err := d.storage()
	if err != nil {
		return nil, nil, nil, err
	}
	dev, err := cuda.Open(0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--device=cuda: %w", err)
	}
	// 10 ms sampling: short enough to catch a step's transient peak, cheap enough
	// to leave running beside the step.
	meter, err := dev.StartPeakMeter(10 * time.Millisecond)
	if err != nil {
		dev.Close()
		return nil, nil, nil, fmt.Errorf("--device=cuda: %w", err)
	}
	s := exec.NewSession(dev, exec.Options{Storage: storage, Profile: profile})
	return s, meter, func() {
		// Stop the meter first: it samples the device that is closed last.
		meter.Stop()
		s.Close()
		dev.Close()
	}, nil
}

// storage is the storage dtype of f32 values that --precision asks for.
func (d *deviceFlags) storage() (tensor.DType, error) {
	switch d.precision {
	case "fp32":
		return tensor.F32, nil
	case "bf16":
		return tensor.BF16, nil
	}
	return tensor.Invalid, fmt.Errorf("--precision %q: want fp32 or bf16", d.precision)
}

// defaultTolerance is 1e-4 for fp32 and 2e-2 for bf16 storage (docs/design.md §8).
func (d *deviceFlags) defaultTolerance() float64 {
	// bf16 keeps 8 significant bits, so 2e-2 is a few ulps of the stored values.
	if d.precision == "bf16" {
		return 2e-2
	}
	return 1e-4
}
