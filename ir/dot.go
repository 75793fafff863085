package ir

import (
	"fmt"
	"strconv"
	"strings"
)

// DOT renders f as a Graphviz digraph: parameters as boxes (weights grey), nodes
// as ellipses labelled with op and result type, outputs as double octagons.
// Like Print, it depends only on f's structure.
func DOT(f *Func) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "digraph %s {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n",
		strconv.Quote(f.Name))
	ids := map[*Value]string{}
	for i, p := range f.Params {
		id := "p" + strconv.Itoa(i)
		ids[p.Value] = id
		style := ""
		if p.Role == RoleWeight || p.Role == RoleState {
			style = ", style=filled, fillcolor=\"#e8e8e8\""
		}
		fmt.Fprintf(&sb, "  %s [shape=box, label=%s%s];\n", id,
			strconv.Quote(p.Name+"\n"+p.Value.Type.String()), style)
	}
	for i, n := range f.Body {
		id := "n" + strconv.Itoa(i)
		var types []string
		for _, r := range n.Results {
			ids[r] = id
			types = append(types, r.Type.String())
		}
		fmt.Fprintf(&sb, "  %s [label=%s];\n", id, strconv.Quote(n.Op.String()+"\n"+strings.Join(types, ", ")))
		for _, a := range n.Args {
			fmt.Fprintf(&sb, "  %s -> %s;\n", ids[a], id)
		}
	}
	for i, o := range f.Outputs {
		id := "o" + strconv.Itoa(i)
		fmt.Fprintf(&sb, "  %s [shape=doubleoctagon, label=%s];\n  %s -> %s;\n", id, strconv.Quote(o.Name),
			ids[o.Value], id)
	}
	sb.WriteString("}\n")
	return sb.String()
}
