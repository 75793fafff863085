package ir

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/lcc-dev/lcc/tensor"
)

// Print renders f in the text form. Values are numbered in definition order
// (parameters first), so the output depends only on f's structure: the same
// function always prints the same bytes.
func Print(f *Func) string {
	var sb strings.Builder
	ids := make(map[*Value]int)
	name := func(v *Value) string {
		id, ok := ids[v]
		if !ok {
			return "%?"
		}
		return "%" + strconv.Itoa(id)
	}
	fmt.Fprintf(&sb, "func @%s(", quoteIdent(f.Name))
	for _, p := range f.Params {
		ids[p.Value] = len(ids)
		fmt.Fprintf(&sb, "\n    %s: %v %v %s", name(p.Value), p.Value.Type, p.Role, strconv.Quote(p.Name))
		if p.Frozen {
			sb.WriteString(" frozen")
		}
		if p.Origin != "" {
			fmt.Fprintf(&sb, " origin %s", strconv.Quote(p.Origin))
			if p.OriginTransposed {
				sb.WriteString(" transposed")
			}
		}
		if len(p.Sources) > 0 {
			sb.WriteString(" sources " + quoteList(p.Sources))
		}
		sb.WriteByte(',')
	}
	if len(f.Params) > 0 {
		sb.WriteByte('\n')
	}
	sb.WriteByte(')')
	// The importer's notes and remarks, as MLIR prints a function's attributes.
	var fattrs []string
	if len(f.Notes) > 0 {
		fattrs = append(fattrs, "notes="+quoteList(f.Notes))
	}
	if len(f.Remarks) > 0 {
		fattrs = append(fattrs, "remarks="+quoteList(f.Remarks))
	}
	if len(fattrs) > 0 {
		sb.WriteString(" attributes {" + strings.Join(fattrs, ", ") + "}")
	}
	sb.WriteString(" {\n")
	for _, n := range f.Body {
		sb.WriteString("  ")
		for _, r := range n.Results {
			ids[r] = len(ids)
		}
		writeNode(&sb, n, name)
		sb.WriteByte('\n')
	}
	sb.WriteString("  return")
	for i, o := range f.Outputs {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, " %s %s", name(o.Value), strconv.Quote(o.Name))
	}
	sb.WriteString("\n}\n")
	return sb.String()
}

// writeNode renders n as one line of the text form (without indent or newline),
// naming values with name: the function body's lines and a fused_elementwise
// node's body (ops_fused_elementwise.go) are one syntax.
func writeNode(sb *strings.Builder, n *Node, name func(*Value) string) {
	for i, r := range n.Results {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(name(r))
	}
	fmt.Fprintf(sb, " = %s(", n.Op)
	for i, a := range n.Args {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(name(a))
	}
	sb.WriteByte(')')
	if len(n.Attrs) > 0 {
		sb.WriteString(" {")
		for i, a := range n.Attrs {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(formatAttr(a))
		}
		sb.WriteByte('}')
	}
	sb.WriteString(" : ")
	for i, r := range n.Results {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(r.Type.String())
	}
	if n.Name != "" {
		fmt.Fprintf(sb, " loc(%s)", strconv.Quote(n.Name))
	}
}

// quoteList prints strings as ["a", "b"].
func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// String prints the node alone, with arguments shown by type (for messages).
func (n *Node) String() string {
	var args []string
	for _, a := range n.Args {
		args = append(args, a.Type.String())
	}
	return fmt.Sprintf("%s(%s)", n.Where(), strings.Join(args, ", "))
}

func quoteIdent(s string) string {
	for _, r := range s {
		if !(r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

func formatAttr(a Attr) string {
	switch v := a.Value.(type) {
	case bool:
		return a.Name // only true is stored
	case int64:
		return a.Name + "=" + strconv.FormatInt(v, 10)
	case []int64:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = strconv.FormatInt(x, 10)
		}
		return a.Name + "=[" + strings.Join(parts, ",") + "]"
	case float64:
		return a.Name + "=" + formatFloat(v, 64)
	case []float64:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = formatFloat(x, 64)
		}
		return a.Name + "=[" + strings.Join(parts, ",") + "]"
	case string:
		return a.Name + "=" + strconv.Quote(v)
	case tensor.DType:
		return a.Name + "=" + v.String()
	case *tensor.Tensor:
		return a.Name + "=" + formatTensor(v)
	}
	panic(fmt.Sprintf("lcc: BUG: attribute %s of Go type %T", a.Name, a.Value))
}

// formatFloat prints the shortest text that reads back to the same value at the
// given precision, always with a '.', an exponent or a word so it reads as a float.
func formatFloat(v float64, bits int) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case math.IsNaN(v):
		return "nan"
	}
	s := strconv.FormatFloat(v, 'g', -1, bits)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// formatTensor prints "f32[2]{1.0, 2.5}"; a tensor whose elements are all equal
// prints as "f32[4,4]{splat 0.0}".
func formatTensor(t *tensor.Tensor) string {
	var sb strings.Builder
	sb.WriteString(T(t.DType, t.Shape...).String())
	sb.WriteByte('{')
	n := t.Numel()
	bits := 32
	if t.DType == tensor.F64 {
		bits = 64
	}
	elem := func(i int) string {
		if t.DType.IsFloat() {
			return formatFloat(t.F[i], bits)
		}
		return strconv.FormatInt(t.I[i], 10)
	}
	if n > 1 && allEqual(t) {
		sb.WriteString("splat ")
		sb.WriteString(elem(0))
	} else {
		for i := 0; i < n; i++ {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(elem(i))
		}
	}
	sb.WriteByte('}')
	return sb.String()
}

func allEqual(t *tensor.Tensor) bool {
	for i := 1; i < t.Numel(); i++ {
		if t.DType.IsFloat() {
			if math.Float64bits(t.F[i]) != math.Float64bits(t.F[0]) {
				return false
			}
		} else if t.I[i] != t.I[0] {
			return false
		}
	}
	return true
}
