package cuda

import "github.com/lcc-dev/lcc/ir"

// lowerFusedElementwise renders a fused_elementwise node (passes.Fuse) as one
// elementwise kernel: its body's ops become the members of a run, so the kernel
// is the composition of the same per-op expressions (exprOf) the unfused ops
// would have had, with the node's arguments as the run's inputs and its results
// as the values it stores. The body's other values have no buffer and no reader
// outside the run, so they stay in registers.
func lowerFusedElementwise(g *gen, n *ir.Node) error {
	body, err := ir.FusedBody(n)
	if err != nil {
		return err
	}
	// outer maps the body's values to the step's: parameters to the node's
	// arguments, returned values to its results; the rest get values of their
	// own, which nothing outside the run reads.
	outer := map[*ir.Value]*ir.Value{}
	for i, p := range body.Params {
		outer[p.Value] = n.Args[i]
	}
	for i, o := range body.Outputs {
		outer[o.Value] = n.Results[i]
	}
	var r fusion
	for _, m := range body.Body {
		c := &ir.Node{Op: m.Op, Attrs: m.Attrs, Name: n.Name}
		for _, a := range m.Args {
			c.Args = append(c.Args, outer[a])
		}
		res, ok := outer[m.Result()]
		if !ok {
			res = &ir.Value{Type: m.Result().Type, Def: c}
			outer[m.Result()] = res
		}
		c.Results = []*ir.Value{res}
		r.add(g.node, c)
	}
	return g.elementwise(&r)
}
