package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cpu"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
)

// deviceFlags select where run and check execute.
type deviceFlags struct {
	device, precision string
	// attentionKernels is check's --attention-kernels: "auto" or "scalar".
	attentionKernels string
}

func (d *deviceFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&d.device, "device", "cpu", "where to run: cpu (reference interpreter) or cuda (GPU 0)")
	cmd.Flags().StringVar(&d.precision, "precision", "fp32",
		"cuda storage precision: fp32, or bf16 (bf16 storage, fp32 math and accumulation)")
}

// runner returns the driver.Runner for the flags and a function that releases the
// device (for cuda, the runner's exec.Session and then the device). A missing GPU
// or driver is an error, not a panic.
func (d *deviceFlags) runner() (driver.Runner, func(), error) {
	storage := tensor.F32
	switch d.precision {
	case "fp32":
	case "bf16":
		storage = tensor.BF16
	default:
		return nil, nil, fmt.Errorf("--precision %q: want fp32 or bf16", d.precision)
	}
	switch d.device {
	case "cpu":
		if storage != tensor.F32 {
			return nil, nil, fmt.Errorf("--precision=%s needs --device=cuda (the CPU reference runs f32)", d.precision)
		}
		return func(f *ir.Func, in map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
			return cpu.Run(f, in, cpu.Options{Precision: tensor.F32})
		}, func() {}, nil
	case "cuda":
		dev, err := cuda.Open(0)
		if err != nil {
			return nil, nil, fmt.Errorf("--device=cuda: %w", err)
		}
		// One session for the command: a training loop runs the same functions every
		// step and so builds, loads and allocates each of them once.
		s := exec.NewSession(dev, exec.Options{Storage: storage, ScalarAttention: d.attentionKernels == "scalar"})
		return s.Run, func() {
			s.Close()
			dev.Close()
		}, nil
	}
	return nil, nil, fmt.Errorf("--device %q: want cpu or cuda", d.device)
}

// session opens GPU 0 and starts a peak-memory meter there, then a session with
// the flags' storage (timing launches by family with profile); release closes them in reverse order.
func (d *deviceFlags) session(profile bool) (*exec.Session, *cuda.PeakMeter, func(), error) {
	storage := tensor.F32
	switch d.precision {
	case "fp32":
	case "bf16":
		storage = tensor.BF16
	default:
		return nil, nil, nil, fmt.Errorf("--precision %q: want fp32 or bf16", d.precision)
	}
	dev, err := cuda.Open(0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--device=cuda: %w", err)
	}
	meter, err := dev.StartPeakMeter(10 * time.Millisecond)
	if err != nil {
		dev.Close()
		return nil, nil, nil, fmt.Errorf("--device=cuda: %w", err)
	}
	s := exec.NewSession(dev, exec.Options{Storage: storage, Profile: profile})
	return s, meter, func() {
		meter.Stop()
		s.Close()
		dev.Close()
	}, nil
}

// defaultTolerance is 1e-4 for fp32 and 2e-2 for bf16 storage (docs/design.md §8).
func (d *deviceFlags) defaultTolerance() float64 {
	if d.precision == "bf16" {
		return 2e-2
	}
	return 1e-4
}
