package train

import (
	"math"
	"slices"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
)

// The models most of this package's tests train.
const (
	gptMini     = "../testdata/onnx/gpt_mini.onnx"
	gptMiniLoss = "../testdata/onnx/gpt_mini_loss.onnx"
)

// small is a fast configuration: gpt_mini on 2×16 tokens.
func small(t *testing.T, steps int) Config {
	c := DefaultConfig()
	c.Model, c.Data = gptMini, "synthetic:copy"
	c.SeqLen, c.Batch, c.Steps, c.LR, c.Seed = 16, 2, steps, 3e-3, 1
	c.Version = "test"
	return c
}

// run trains c, failing the test on an error.
func run(t *testing.T, c Config) *Result {
	t.Helper()
	r, err := Train(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// mean is the mean of xs.
func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// bits is xs as their IEEE 754 bits, to compare runs exactly.
func bits(xs []float64) []uint64 {
	out := make([]uint64, len(xs))
	for i, x := range xs {
		out[i] = math.Float64bits(x)
	}
	return out
}

// sameBits reports whether a and b hold the same float64s bit for bit (a
// resumed run must not differ from a straight one even in the last bit).
func sameBits(a, b []float64) bool { return slices.Equal(bits(a), bits(b)) }

// step compiles c's training step (Step), failing the test on an error.
func step(t *testing.T, c Config) *driver.Result {
	t.Helper()
	st, err := Step(c)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// countOps is the number of op nodes in f's body.
func countOps(f *ir.Func, op ir.Op) int {
	n := 0
	for _, nd := range f.Body {
		if nd.Op == op {
			n++
		}
	}
	return n
}
