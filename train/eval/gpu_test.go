package eval

import (
	"math"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
)

// TestGPUEval runs lcc eval's forward on GPU 0 (the executor lcc run uses) and
// holds perplexity and the pass-key table to the CPU interpreter's: the
// perplexity within 1e-4 (fp32 kernels), every accuracy equal but for a digit
// whose two best logits are within rounding (allowed: one digit per cell).
func TestGPUEval(t *testing.T) {
	s := exec.NewSession(devicetest.Open(t), exec.Options{Storage: tensor.F32})
	defer s.Close()
	gpu := Options{Model: llamaMini, Batch: 2, Run: s.Run, Release: func(f *ir.Func) { s.Release(f) }}
	cpu := Options{Model: llamaMini, Batch: 2}
	po := PerplexityOptions{Data: "tokens:" + tokensBin, SeqLen: 64, Windows: 6}
	g, c := scoreBoth(t, ScorePerplexity, gpu, cpu, po)
	if rel := math.Abs(g.PPL-c.PPL) / c.PPL; !(rel < 1e-4) {
		t.Errorf("perplexity on the GPU %.7g, on the CPU %.7g: rel err %.3g", g.PPL, c.PPL, rel)
	}
	pk := PasskeyOptions{Lengths: []int{64, 128}, Depths: []float64{0, 50, 100}, Trials: 4, Seed: 1}
	gp, cp := scoreBoth(t, ScorePasskey, gpu, cpu, pk)
	for d := range pk.Depths {
		for l := range pk.Lengths {
			if math.Abs(gp.Accuracy[d][l]-cp.Accuracy[d][l]) > 1.0/(5*4)+1e-12 {
				t.Errorf("pass key at %d, depth %v: GPU %.3f, CPU %.3f", pk.Lengths[l], pk.Depths[d],
					gp.Accuracy[d][l], cp.Accuracy[d][l])
			}
		}
	}
}

// scoreBoth runs one score with the GPU's options and then the CPU's, so that
// the test compares what the same flags measure on each.
func scoreBoth[O, R any](t *testing.T, score func(Options, O) (R, error), gpu, cpu Options, o O) (g, c R) {
	t.Helper()
	g, err := score(gpu, o)
	if err != nil {
		t.Fatal(err)
	}
	if c, err = score(cpu, o); err != nil {
		t.Fatal(err)
	}
	return g, c
}
