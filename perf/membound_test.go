package perf

import (
	"testing"

	"github.com/lcc-dev/lcc/interp"
)

// TestWorkloadsRunOnCPU runs the benchmark graphs at a small shape on the CPU
// interpreter: they build, verify and give a loss near log V for random data.
func TestWorkloadsRunOnCPU(t *testing.T) {
	f, err := CEFunc(64, 16, 100)
	if err != nil {
		t.Fatal(err)
	}
	out, err := interp.Run(f, CEInputs(64, 16, 100, 1), interp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l := out["loss"].F[0]; l < 4 || l > 5.3 {
		t.Errorf("loss %v, want about log(100) = 4.6", l)
	}
	fwd, bwd, err := EmbedFuncs(64, 8, 20)
	if err != nil {
		t.Fatal(err)
	}
	fin, bin := EmbedInputs(64, 8, 20, 1)
	if _, err := interp.Run(fwd, fin, interp.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := interp.Run(bwd, bin, interp.Options{}); err != nil {
		t.Fatal(err)
	}
}
