package report

import (
	"fmt"
	"strings"

	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/tensor"
)

// FusionLines are the report's `fused` lines for what fuse did: the groups, the
// ops they hold and the nodes before and after, the traffic saved, then one line
// per group (its shape, its ops in order, its inputs and results).
func FusionLines(r passes.FuseResult) []string {
	ops := 0
	for _, g := range r.Groups {
		ops += len(g.Ops)
	}
	lines := []string{fmt.Sprintf("%d elementwise groups of %d ops, nodes %d → %d, about %s less memory traffic than a kernel per op",
		len(r.Groups), ops, r.NodesBefore, r.NodesAfter, Bytes(r.SavedBytes()))}
	for _, g := range r.Groups {
		lines = append(lines, fmt.Sprintf("  %s %s (%d in, %d out, %s saved)", tensor.ShapeString(g.Shape),
			strings.Join(g.Ops, ", "), g.Inputs, g.Outputs, Bytes(g.SavedBytes)))
	}
	return lines
}
