package ir

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// A fused elementwise group: several elementwise ops of one output shape as one
// node, so that the GPU runs them as one kernel that reads each input once,
// writes each result once and keeps the intermediates in registers (passes.Fuse
// makes them, after autodiff and checkpointing). The node carries its body, a
// small function over its arguments, in the text form of the IR itself:
//
//	%4, %5 = fused_elementwise(%1, %2, %3) {body="%3 = mul(%0, %1) : f32[4,8];
//	    %4 = silu(%3) : f32[4,8]; %5 = add(%4, %2) : f32[4,8]; return %5, %3"}
//	    : f32[4,8], f32[4,8]
//
// (one line when printed). Inside body, %0 … %(k-1) are the node's k arguments
// with their types, the lines are elementwise nodes in order, numbered on from
// k, and the return names the node's results in order. The body's numbering
// depends only on its structure, so a group prints the same bytes in every
// compile, and printing and parsing the outer function round-trip it as they
// round-trip any string attribute.
//
// Semantics are those of the body's nodes run in order: the CPU interpreter
// runs exactly those ops (so a fused step computes bit for bit what the
// unfused one does, rounding after every op as before), and codegen composes
// the same per-op C expressions. The op has no gradient: fusion runs after
// autodiff, on the finished step.

// FusedBodyAttr is the attribute that holds a fused_elementwise node's body.
const FusedBodyAttr = "body"

func init() {
	def(OpFusedElementwise, OpInfo{Name: "fused_elementwise", MinArgs: 1, MaxArgs: -1,
		Attrs: []AttrSpec{{FusedBodyAttr, AttrString}}, Infer: inferFusedElementwise,
		// Fusion runs on the differentiated step: nothing differentiates through it.
		NoGrad: true})
}

// bodies caches parsed bodies by their argument types and text: the interpreter
// and codegen read a body on every run, and a body never changes once made.
var bodies sync.Map // string → fusedBody

type fusedBody struct {
	f   *Func
	err error
}

// FusedBody returns n's body as a function whose parameters are n's arguments
// (named "0", "1", …, role input) and whose outputs are n's results, in order.
// The function is shared by every node with the same body and argument types:
// callers must not modify it.
func FusedBody(n *Node) (*Func, error) {
	text := n.AttrString(FusedBodyAttr)
	var key strings.Builder
	for _, a := range n.Args {
		key.WriteString(a.Type.String() + "\x00")
	}
	key.WriteString(text)
	if b, ok := bodies.Load(key.String()); ok {
		return b.(fusedBody).f, b.(fusedBody).err
	}
	f, err := parseFusedBody(n.Args, text)
	bodies.Store(key.String(), fusedBody{f, err})
	return f, err
}

// parseFusedBody reads a body's text: its lines become the body of a function
// whose parameters have the argument types, parsed by Parse, so the body's
// syntax is the IR's.
func parseFusedBody(args []*Value, text string) (*Func, error) {
	lines := strings.Split(text, "; ")
	ret, ok := strings.CutPrefix(lines[len(lines)-1], "return ")
	if !ok {
		return nil, fmt.Errorf("body %q does not end in a return", text)
	}
	var src strings.Builder
	src.WriteString("func @fused(")
	for i, a := range args {
		fmt.Fprintf(&src, "\n    %%%d: %v input %q,", i, a.Type, strconv.Itoa(i))
	}
	src.WriteString("\n) {\n")
	for _, l := range lines[:len(lines)-1] {
		src.WriteString("  " + l + "\n")
	}
	src.WriteString("  return")
	for i, r := range strings.Split(ret, ", ") {
		if i > 0 {
			src.WriteByte(',')
		}
		fmt.Fprintf(&src, " %s %q", r, strconv.Itoa(i))
	}
	src.WriteString("\n}\n")
	f, err := Parse(src.String())
	if err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	if err := Verify(f); err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	if len(f.Body) == 0 || len(f.Outputs) == 0 {
		return nil, fmt.Errorf("body %q has no nodes or no results", text)
	}
	for _, m := range f.Body {
		if !m.Op.Info().Elementwise {
			return nil, fmt.Errorf("body: %s is not elementwise", m.Where())
		}
	}
	return f, nil
}

// FusedBodyText renders body, a function whose parameters stand for a
// fused_elementwise node's arguments in order, as the node's body attribute.
// Parameter names and output names are not part of the text: the parameters are
// %0 … in order, the outputs the return's values in order.
func FusedBodyText(body *Func) string {
	ids := map[*Value]int{}
	for _, p := range body.Params {
		ids[p.Value] = len(ids)
	}
	name := func(v *Value) string {
		if id, ok := ids[v]; ok {
			return "%" + strconv.Itoa(id)
		}
		return "%?"
	}
	var sb strings.Builder
	for _, n := range body.Body {
		for _, r := range n.Results {
			ids[r] = len(ids)
		}
		writeNode(&sb, n, name)
		sb.WriteString("; ")
	}
	sb.WriteString("return ")
	for i, o := range body.Outputs {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(name(o.Value))
	}
	return sb.String()
}

func inferFusedElementwise(n *Node) ([]Type, error) {
	f, err := FusedBody(n)
	if err != nil {
		return nil, err
	}
	var ts []Type
	for _, o := range f.Outputs {
		ts = append(ts, o.Value.Type)
	}
	return ts, nil
}
