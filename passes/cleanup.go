package passes

import (
	"fmt"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// EliminateDeadCode removes nodes whose results reach no output.
var EliminateDeadCode = Register(Pass{Name: "dce", Doc: "remove nodes whose results are unused",
	Run: func(f *ir.Func) error { DeadCode(f); return nil }})

// DeadCode removes every node none of whose results is used by a live node or an
// output (Func.RemoveDeadNodes). It returns the number of nodes removed.
func DeadCode(f *ir.Func) int { return f.RemoveDeadNodes() }

// EliminateCommonSubexpressions merges nodes with equal op, arguments and attributes.
var EliminateCommonSubexpressions = Register(Pass{Name: "cse",
	Doc: "merge nodes that compute the same value",
	Run: func(f *ir.Func) error { CSE(f); return nil }})

// CSE replaces each node equal to an earlier one (same op, args and attributes)
// by the earlier one's results, then removes it. Constants compare by value.
func CSE(f *ir.Func) int {
	seen := make(map[string]*ir.Node)
	ids := make(map[*ir.Value]int)
	for i, p := range f.Params {
		ids[p.Value] = i
	}
	next := len(f.Params)
	merged := 0
	repl := make(map[*ir.Value]*ir.Value)
	body := f.Body[:0]
	for _, n := range f.Body {
		for i, a := range n.Args {
			if r, ok := repl[a]; ok {
				n.Args[i] = r
			}
		}
		var sb strings.Builder
		sb.WriteString(n.Op.String())
		for _, a := range n.Args {
			fmt.Fprintf(&sb, " %d", ids[a])
		}
		for _, a := range n.Attrs {
			fmt.Fprintf(&sb, " %s=%v", a.Name, attrKey(a.Value))
		}
		for _, r := range n.Results {
			fmt.Fprintf(&sb, " : %v", r.Type)
		}
		key := sb.String()
		if prev, ok := seen[key]; ok {
			for i, r := range n.Results {
				repl[r] = prev.Results[i]
			}
			merged++
			continue
		}
		seen[key] = n
		for _, r := range n.Results {
			ids[r] = next
			next++
		}
		body = append(body, n)
	}
	f.Body = body
	for i, o := range f.Outputs {
		if r, ok := repl[o.Value]; ok {
			f.Outputs[i].Value = r
		}
	}
	return merged
}

func attrKey(v any) string {
	if t, ok := v.(*tensor.Tensor); ok {
		return fmt.Sprintf("%v%v%v%v", t.DType, t.Shape, t.F, t.I)
	}
	return fmt.Sprint(v)
}

// Cleanup is the pipeline every compile starts with.
var Cleanup = []Pass{EliminateCommonSubexpressions, EliminateDeadCode}
