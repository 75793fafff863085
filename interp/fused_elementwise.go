package interp

import (
	"fmt"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// A fused_elementwise node runs its body's ops in order with their own kernels,
// so a fused step computes bit for bit what the unfused one did: every op
// rounds its result to its dtype as before. Only the emulated narrower storage
// (Options.Store) is skipped inside the body, since the GPU keeps a group's
// intermediates in fp32 registers and stores only the node's results (which
// exec rounds to their storage as any node's).
func init() { Register(ir.OpFusedElementwise, kernelFusedElementwise) }

func kernelFusedElementwise(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	body, err := ir.FusedBody(n)
	if err != nil {
		return nil, err
	}
	vals := make(map[*ir.Value]*tensor.Tensor, len(body.Params)+len(body.Body))
	for i, p := range body.Params {
		vals[p.Value] = args[i]
	}
	inner := opts
	inner.Store = nil
	for i, m := range body.Body {
		as := make([]*tensor.Tensor, len(m.Args))
		for j, a := range m.Args {
			as[j] = vals[a]
		}
		res, err := exec(m, as, inner)
		if err != nil {
			return nil, fmt.Errorf("body node %d: %w", i, err)
		}
		for j, r := range m.Results {
			vals[r] = res[j]
		}
	}
	out := make([]*tensor.Tensor, len(body.Outputs))
	for i, o := range body.Outputs {
		out[i] = vals[o.Value]
	}
	return out, nil
}
