// Package drivertest holds test fixtures that need the driver: the shared models'
// training steps that lower packages' tests (codegen/cuda, runtime/exec) run. It
// sits at the driver's level; only tests import it.
package drivertest

import (
	"math/rand/v2"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/internal/llamagen"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
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

// FlagshipSteps are small configurations of the flagship's architecture
// (internal/llamagen) for FlagshipStep: flagship.py's layout with head and FFN
// widths that 16-byte vectors divide, the same with widths they do not (a head
// of 12, RoPE halves of 6, FFN 50), and llama_mini's layout (RoPE on [B,H,T,D]
// between transposes).
var FlagshipSteps = map[string]llamagen.Config{
	"fused":   {Dim: 64, Layers: 2, Heads: 4, FFN: 96, Vocab: 256, Batch: 1, SeqLen: 32, Fused: true},
	"ragged":  {Dim: 36, Layers: 1, Heads: 3, FFN: 50, Vocab: 96, Batch: 2, SeqLen: 9, Fused: true},
	"unfused": {Dim: 64, Layers: 1, Heads: 4, FFN: 96, Vocab: 256, Batch: 1, SeqLen: 32},
}

// FlagshipStep is the program lcc train compiles for c (cross-entropy loss, no
// checkpoints, the h200x1 pipeline): the forward and backward of a model whose
// RoPE, SwiGLU and residual adds are the flagship's. It fails t on an error.
func FlagshipStep(t testing.TB, c llamagen.Config) *ir.Func {
	t.Helper()
	f, err := llamagen.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := driver.Compile(f, driver.CompileOptions{Target: tg,
		Options: driver.Options{Loss: "cross-entropy", Checkpoint: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Func
}

// CompiledStep is the program lcc train compiles for the model at path with
// bindings b (its loss, no checkpoints, the h200x1 pipeline). It fails t on an
// error.
func CompiledStep(t testing.TB, path string, b driver.Bindings) *ir.Func {
	t.Helper()
	f, err := driver.Load(path, b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := driver.Compile(f, driver.CompileOptions{Target: tg, Options: driver.Options{Loss: "auto", Checkpoint: "none"}})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return res.Func
}

// RandomInputs draws every parameter of f without data from rng, in parameter
// order: standard normal floats, and integers (token ids, labels) below intBelow.
func RandomInputs(f *ir.Func, rng *rand.Rand, intBelow int64) map[string]*tensor.Tensor {
	in := map[string]*tensor.Tensor{}
	for _, p := range f.Params {
		if p.Data != nil {
			continue
		}
		ty := p.Value.Type
		x := tensor.New(ty.DType, ty.Shape...)
		for i := range x.F {
			x.F[i] = rng.NormFloat64()
		}
		for i := range x.I {
			x.I[i] = rng.Int64N(intBelow)
		}
		in[p.Name] = x
	}
	return in
}
