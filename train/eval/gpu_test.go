package eval

import (
	"math"
	"testing"

	"github.com/lcc-dev/lcc/internal/gputest"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
)

// TestGPUEval runs lcc eval's forward on GPU 0 (the executor lcc run uses) and
// holds perplexity and the pass-key table to the CPU interpreter's: the
// perplexity within 1e-4 (fp32 kernels), every accuracy equal but for a digit
// whose two best logits are within rounding (allowed: one digit per cell).
func TestGPUEval(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	defer dev.Close()
	s := exec.NewSession(dev, exec.Options{Storage: tensor.F32})
	defer s.Close()
	gpu := Options{Model: llamaMini, Batch: 2, Run: s.Run, Release: func(f *ir.Func) { s.Release(f) }}
	cpu := Options{Model: llamaMini, Batch: 2}
	po := PerplexityOptions{Data: "tokens:" + tokensBin, SeqLen: 64, Windows: 6}
	g, err := ScorePerplexity(gpu, po)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ScorePerplexity(cpu, po)
	if err != nil {
		t.Fatal(err)
	}
	if rel := math.Abs(g.PPL-c.PPL) / c.PPL; !(rel < 1e-4) {
		t.Errorf("perplexity on the GPU %.7g, on the CPU %.7g: rel err %.3g", g.PPL, c.PPL, rel)
	}
	pk := PasskeyOptions{Lengths: []int{64, 128}, Depths: []float64{0, 50, 100}, Trials: 4, Seed: 1}
	gp, err := ScorePasskey(gpu, pk)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ScorePasskey(cpu, pk)
	if err != nil {
		t.Fatal(err)
	}
	for d := range pk.Depths {
		for l := range pk.Lengths {
			if math.Abs(gp.Accuracy[d][l]-cp.Accuracy[d][l]) > 1.0/(5*4)+1e-12 {
				t.Errorf("pass key at %d, depth %v: GPU %.3f, CPU %.3f", pk.Lengths[l], pk.Depths[d],
					gp.Accuracy[d][l], cp.Accuracy[d][l])
			}
		}
	}
}
