package ir

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lcc-dev/lcc/tensor"
)

// Type is a tensor type: an element type and a concrete shape. Labels, when not
// nil, has one entry per dim naming the symbolic dim it was bound from ("" if none);
// only parameter types carry labels.
type Type struct {
	DType  tensor.DType
	Shape  []int64
	Labels []string
}

// T is shorthand for a Type without labels.
func T(dt tensor.DType, shape ...int64) Type {
	return Type{DType: dt, Shape: append([]int64{}, shape...)}
}

// Rank is the number of dims.
func (t Type) Rank() int { return len(t.Shape) }

// Numel is the number of elements (shapes in a verified Func never overflow).
func (t Type) Numel() int64 { return tensor.Elements[int64](t.Shape) }

// Bytes is the storage size in the type's dtype.
func (t Type) Bytes() int64 { return t.Numel() * int64(t.DType.Size()) }

// SameShape reports whether t and u have equal shapes (labels ignored).
func (t Type) SameShape(u Type) bool { return slices.Equal(t.Shape, u.Shape) }

// Equal reports whether t and u have the same dtype and shape (labels ignored).
func (t Type) Equal(u Type) bool { return t.DType == u.DType && t.SameShape(u) }

// String renders the type as in the text form: "f32[2,16,64]" or, with labels,
// "i64[batch=2,seq=16]".
func (t Type) String() string {
	if len(t.Shape) > MaxRank {
		// Not a valid type (ShapeNumel refuses it): in a message, cut it short.
		return t.DType.String() + tensor.Brief(t.Shape)
	}
	var sb strings.Builder
	sb.WriteString(t.DType.String())
	sb.WriteByte('[')
	for i, d := range t.Shape {
		if i > 0 {
			sb.WriteByte(',')
		}
		if t.Labels != nil && t.Labels[i] != "" {
			sb.WriteString(t.Labels[i])
			sb.WriteByte('=')
		}
		fmt.Fprint(&sb, d)
	}
	sb.WriteByte(']')
	return sb.String()
}

// Role says what a parameter is for; it drives autodiff and memory planning.
type Role uint8

// Parameter roles.
const (
	RoleInput  Role = iota // data fed each step (token ids, activations)
	RoleWeight             // a trainable or frozen model parameter
	RoleLabel              // training targets, fed each step
	RoleState              // optimizer state and other persistent buffers
)

var roleNames = [...]string{RoleInput: "input", RoleWeight: "weight", RoleLabel: "label",
	RoleState: "state"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// Value is an SSA value: a parameter or one result of a node.
type Value struct {
	Type  Type
	Def   *Node  // defining node; nil for parameters
	Index int    // which result of Def
	Param *Param // non-nil for parameters
}

// Param is a function parameter. Data holds a weight's or state's initial value
// (nil for inputs and labels, and for weights whose data lives elsewhere).
type Param struct {
	Name  string
	Role  Role
	Value *Value
	Data  *tensor.Tensor
	// Frozen weights get no gradient.
	Frozen bool
	// Origin names the framework parameter this weight was derived from when the
	// exporter folded an op into it (PyTorch's Linear weight W becomes an
	// initializer "val_9" holding Wᵀ); "" when the weight is the parameter itself.
	Origin string
	// OriginTransposed says the weight holds Origin's transpose.
	OriginTransposed bool
	// Sources lists the framework parameters, in the exporter's placeholder
	// spelling ("p_blocks_0_ln2_weight"), that the ops reading this weight were
	// made from. An exporter that merges equal initializers makes one weight stand
	// for several parameters; its gradient is then the sum of theirs. Printed as
	// `sources ["a", "b"]`.
	Sources []string
}

// Node is one operation. Name is where it came from (an ONNX node name) and is
// used in error messages; it does not affect semantics.
type Node struct {
	Op      Op
	Args    []*Value
	Attrs   Attrs
	Results []*Value
	Name    string
}

// Result returns the node's only result; it panics if the node has several.
func (n *Node) Result() *Value {
	if len(n.Results) != 1 {
		panic(fmt.Sprintf("lcc: BUG: %s has %d results", n.Op, len(n.Results)))
	}
	return n.Results[0]
}

// Where describes the node for error messages: `matmul "/attn/MatMul"`.
func (n *Node) Where() string {
	if n.Name != "" {
		return fmt.Sprintf("%s %s", n.Op, tensor.Brief(strconv.Quote(n.Name))) // a file's names may be megabytes
	}
	return n.Op.String()
}

// Output is a named function result.
type Output struct {
	Name  string
	Value *Value
}

// Func is a function: parameters, a body in topological order, named results.
type Func struct {
	Name    string
	Params  []*Param
	Body    []*Node
	Outputs []Output
	// Notes are importer findings worth telling the user: e.g. framework
	// parameters the exporter folded into constants. Printed, with Remarks, as the
	// function's `attributes {notes=[...], remarks=[...]}`.
	Notes []string
	// Remarks say what the importer changed to keep the model the framework's,
	// for the user to know (not warnings): e.g. merged parameters it untied.
	Remarks []string
	// Untrained lists framework parameters the function has no weight of its own
	// for (the exporter folded or merged them beyond undoing): training the
	// function would not train them as the framework does, so lcc train refuses.
	Untrained []string
	// InlineBytes is the size of the weights the model's file held inline
	// (ONNX raw_data; 0 with external data): setting a run up holds them once
	// more beside the decoded weights while the file is parsed, which the host
	// plan counts (cost.HostModelBytes's caller, driver's hostModel).
	InlineBytes int64
}

// Param returns the parameter called name, or nil.
func (f *Func) Param(name string) *Param {
	for _, p := range f.Params {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Output returns the result called name, or nil.
func (f *Func) Output(name string) *Value {
	for _, o := range f.Outputs {
		if o.Name == name {
			return o.Value
		}
	}
	return nil
}

// AddParam appends a parameter of type t and returns its value.
func (f *Func) AddParam(name string, role Role, t Type, data *tensor.Tensor) *Value {
	p := &Param{Name: name, Role: role, Data: data}
	p.Value = &Value{Type: t, Param: p}
	f.Params = append(f.Params, p)
	return p.Value
}

// Uses maps each value to the nodes that read it, in body order (a node reading a
// value twice appears twice). Outputs are not nodes; see IsOutput.
func (f *Func) Uses() map[*Value][]*Node {
	uses := make(map[*Value][]*Node)
	for _, n := range f.Body {
		for _, a := range n.Args {
			uses[a] = append(uses[a], n)
		}
	}
	return uses
}

// OutputSet is the set of f's result values. A pass that asks about many
// values builds it once: IsOutput scans the outputs, and a training step has one
// per weight's gradient.
func (f *Func) OutputSet() map[*Value]bool {
	set := make(map[*Value]bool, len(f.Outputs))
	for _, o := range f.Outputs {
		set[o.Value] = true
	}
	return set
}

// IsOutput reports whether v is one of f's results (see OutputSet).
func (f *Func) IsOutput(v *Value) bool {
	for _, o := range f.Outputs {
		if o.Value == v {
			return true
		}
	}
	return false
}

// ReplaceUses makes every node argument and output that reads old read new instead.
func (f *Func) ReplaceUses(old, new *Value) {
	for _, n := range f.Body {
		for i, a := range n.Args {
			if a == old {
				n.Args[i] = new
			}
		}
	}
	for i := range f.Outputs {
		if f.Outputs[i].Value == old {
			f.Outputs[i].Value = new
		}
	}
}

// RemoveDeadNodes removes every node none of whose results is used by a live node
// or an output, and returns the number removed. Every lcc op is free of side
// effects, so this is safe for forward and backward nodes alike. It is lcc's one
// dead-code remover: the dce pass and autodiff call it.
func (f *Func) RemoveDeadNodes() int {
	live := make(map[*Value]bool)
	for _, o := range f.Outputs {
		live[o.Value] = true
	}
	keep := make([]bool, len(f.Body))
	for i := len(f.Body) - 1; i >= 0; i-- {
		n := f.Body[i]
		for _, r := range n.Results {
			if live[r] {
				keep[i] = true
				break
			}
		}
		if keep[i] {
			for _, a := range n.Args {
				live[a] = true
			}
		}
	}
	body := f.Body[:0]
	removed := 0
	for i, n := range f.Body {
		if keep[i] {
			body = append(body, n)
		} else {
			removed++
		}
	}
	f.Body = body
	return removed
}

// Clone returns a deep copy of f's structure; parameter Data tensors are shared.
func (f *Func) Clone() *Func {
	g := &Func{Name: f.Name, Notes: append([]string(nil), f.Notes...),
		Remarks: append([]string(nil), f.Remarks...), Untrained: append([]string(nil), f.Untrained...),
		InlineBytes: f.InlineBytes}
	m := make(map[*Value]*Value)
	for _, p := range f.Params {
		q := &Param{Name: p.Name, Role: p.Role, Data: p.Data, Frozen: p.Frozen, Origin: p.Origin,
			OriginTransposed: p.OriginTransposed, Sources: p.Sources}
		q.Value = &Value{Type: p.Value.Type, Param: q}
		m[p.Value] = q.Value
		g.Params = append(g.Params, q)
	}
	for _, n := range f.Body {
		c := &Node{Op: n.Op, Attrs: n.Attrs.Clone(), Name: n.Name}
		for _, a := range n.Args {
			c.Args = append(c.Args, m[a])
		}
		for i, r := range n.Results {
			v := &Value{Type: r.Type, Def: c, Index: i}
			m[r] = v
			c.Results = append(c.Results, v)
		}
		g.Body = append(g.Body, c)
	}
	for _, o := range f.Outputs {
		g.Outputs = append(g.Outputs, Output{Name: o.Name, Value: m[o.Value]})
	}
	return g
}

// MaxTypeElements bounds the element count of an IR type. Types are only numbers:
// a [1M, 1M] causal mask at a million tokens is a legal type that a pass is
// expected to rewrite away, so the bound only guards int64 arithmetic on sizes.
// Host allocations are bounded separately by tensor.MaxElements.
const MaxTypeElements = 1 << 56

// MaxRank bounds the rank of an IR type. No model needs more; a file's million
// unsqueezed axes would otherwise make every message and printed type megabytes.
const MaxRank = 64

// ShapeNumel returns the element count of shape, or an error if a dim is negative,
// the count exceeds MaxTypeElements or the rank MaxRank.
func ShapeNumel(shape []int64) (int64, error) {
	if len(shape) > MaxRank {
		return 0, fmt.Errorf("rank %d exceeds the limit of %d", len(shape), MaxRank)
	}
	return tensor.NumelAtMost(shape, MaxTypeElements)
}
