package cuda_test

import (
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver/drivertest"
	"github.com/lcc-dev/lcc/tensor"
)

// TestFlagshipViews checks what fusion across shape changes leaves of the data
// movement in the flagship's training step (llamagen's layout of flagship.py):
// no slice kernels (RoPE reads its halves in place), one split per layer (v
// out of the qkv projection, for attention; q and k and the w13 halves are read
// in place), one concat copy per layer (dv into the qkv gradient; RoPE's
// backward and SwiGLU's write their parts of the gradients in place), and no
// elementwise kernel for the residual adds (the norms beside them do them).
func TestFlagshipViews(t *testing.T) {
	c := drivertest.FlagshipSteps["fused"]
	f := drivertest.FlagshipStep(t, c)
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		p, err := codegen.Build(f, codegen.Options{Arch: "compute_80", Storage: st})
		if err != nil {
			t.Fatal(err)
		}
		fams := map[string]int{}
		for _, s := range p.Plan.Steps {
			fams[s.Op]++
		}
		l := int(c.Layers)
		if fams["slice"] != 0 || fams["split"] != l || fams["concat"] != l || fams["full"] > 1 {
			t.Errorf("%v: launches per family %v; want no slice, %d split and concat, at most one full", st, fams, l)
		}
		// Per layer RoPE of q and k, SwiGLU, and their backward (the residual adds
		// run inside the norms), plus the RoPE table.
		if fams["elementwise"] != 6*l+1 {
			t.Errorf("%v: %d elementwise launches, want %d (%v)", st, fams["elementwise"], 6*l+1, fams)
		}
	}
}
