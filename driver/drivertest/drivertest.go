// Package drivertest holds test fixtures that need the driver: the shared models'
// training steps that lower packages' tests (codegen/cuda, runtime/exec) run. It
// sits at the driver's level; only tests import it.
package drivertest

import (
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
)

// TrainingGraph loads a shared model with seq 16 and batch 2 and appends its
// backward pass: of the loss when the model has a scalar output, else the
// vector-Jacobian products of every output (seed parameters "d_<output>"). It
// fails t on an error.
func TrainingGraph(t testing.TB, path string) *ir.Func {
	t.Helper()
	f, err := driver.Load(path, driver.Bindings{SeqLen: 16, Batch: 2})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	opts := autodiff.Options{}
	for _, o := range f.Outputs {
		if o.Value.Type.Rank() == 0 {
			opts.Loss = o.Name
		}
	}
	if opts.Loss == "" {
		opts.Seeds = map[string]string{}
		for _, o := range f.Outputs {
			opts.Seeds[o.Name] = "d_" + o.Name
		}
	}
	g, err := autodiff.Grad(f, opts)
	if err != nil {
		t.Fatalf("%s: autodiff: %v", path, err)
	}
	return g
}
