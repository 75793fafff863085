package ir

import (
	"fmt"
	"math"
	"sort"

	"github.com/lcc-dev/lcc/tensor"
)

// AttrKind is the type of an attribute value.
type AttrKind uint8

// Attribute kinds. Each op's registry row declares the kind of every attribute it
// accepts; Verify rejects others.
const (
	AttrBool   AttrKind = iota // bool; printed as a bare name when true, omitted when false
	AttrInt                    // int64
	AttrInts                   // []int64
	AttrFloat                  // float64
	AttrFloats                 // []float64
	AttrString                 // string
	AttrTensor                 // *tensor.Tensor
	AttrDType                  // tensor.DType
)

var attrKindNames = [...]string{AttrBool: "bool", AttrInt: "int", AttrInts: "ints",
	AttrFloat: "float", AttrFloats: "floats", AttrString: "string", AttrTensor: "tensor",
	AttrDType: "dtype"}

func (k AttrKind) String() string { return attrKindNames[k] }

// Attr is one named attribute.
type Attr struct {
	Name  string
	Value any // bool, int64, []int64, float64, []float64, string, *tensor.Tensor, tensor.DType
}

// Attrs is a node's attributes, kept sorted by name so that printing is
// deterministic. The zero value is empty and ready to use.
type Attrs []Attr

// A builds Attrs from alternating names and values: A("axis", 1, "eps", 1e-5).
// Go ints become int64 and []int becomes []int64.
func A(kv ...any) Attrs {
	if len(kv)%2 != 0 {
		panic("lcc: BUG: ir.A needs name/value pairs")
	}
	var as Attrs
	for i := 0; i < len(kv); i += 2 {
		as = as.With(kv[i].(string), kv[i+1])
	}
	return as
}

func normalize(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case float32:
		return float64(x)
	case []int:
		out := make([]int64, len(x))
		for i, e := range x {
			out[i] = int64(e)
		}
		return out
	}
	return v
}

// With returns a copy of as with name set to v (replacing any previous value).
// A false bool removes the attribute, since absent means false.
func (as Attrs) With(name string, v any) Attrs {
	v = normalize(v)
	out := make(Attrs, 0, len(as)+1)
	for _, a := range as {
		if a.Name != name {
			out = append(out, a)
		}
	}
	if b, ok := v.(bool); ok && !b {
		return out
	}
	out = append(out, Attr{Name: name, Value: v})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Clone returns a copy (tensor values are shared; they are never mutated).
func (as Attrs) Clone() Attrs { return append(Attrs(nil), as...) }

// Get returns the value of name and whether it is present.
func (as Attrs) Get(name string) (any, bool) {
	for _, a := range as {
		if a.Name == name {
			return a.Value, true
		}
	}
	return nil, false
}

// Bool returns a bool attribute (false when absent).
func (as Attrs) Bool(name string) bool {
	v, _ := as.Get(name)
	b, _ := v.(bool)
	return b
}

// Int returns an int attribute or def when absent.
func (as Attrs) Int(name string, def int64) int64 {
	if v, ok := as.Get(name); ok {
		if i, ok := v.(int64); ok {
			return i
		}
	}
	return def
}

// Ints returns an ints attribute (nil when absent).
func (as Attrs) Ints(name string) []int64 {
	v, _ := as.Get(name)
	x, _ := v.([]int64)
	return x
}

// Float returns a float attribute or def when absent.
func (as Attrs) Float(name string, def float64) float64 {
	if v, ok := as.Get(name); ok {
		if f, ok := v.(float64); ok {
			return f
		}
	}
	return def
}

// Floats returns a floats attribute (nil when absent).
func (as Attrs) Floats(name string) []float64 {
	v, _ := as.Get(name)
	x, _ := v.([]float64)
	return x
}

// String returns a string attribute or def when absent.
func (as Attrs) String(name, def string) string {
	if v, ok := as.Get(name); ok {
		if s, ok := v.(string); ok {
			return s
		}
	}
	return def
}

// Tensor returns a tensor attribute (nil when absent).
func (as Attrs) Tensor(name string) *tensor.Tensor {
	v, _ := as.Get(name)
	t, _ := v.(*tensor.Tensor)
	return t
}

// DType returns a dtype attribute or def when absent.
func (as Attrs) DType(name string, def tensor.DType) tensor.DType {
	if v, ok := as.Get(name); ok {
		if d, ok := v.(tensor.DType); ok {
			return d
		}
	}
	return def
}

func kindOf(v any) (AttrKind, error) {
	switch v.(type) {
	case bool:
		return AttrBool, nil
	case int64:
		return AttrInt, nil
	case []int64:
		return AttrInts, nil
	case float64:
		return AttrFloat, nil
	case []float64:
		return AttrFloats, nil
	case string:
		return AttrString, nil
	case *tensor.Tensor:
		return AttrTensor, nil
	case tensor.DType:
		return AttrDType, nil
	}
	return 0, fmt.Errorf("unsupported attribute value of Go type %T", v)
}

// attr returns n's attribute name, or its op's default (nil when the default is
// the kind's zero value). Reading an attribute the op does not declare, or as
// another kind, is a bug in the reader, and panics.
func (n *Node) attr(name string, kind AttrKind) any {
	info := n.Op.Info()
	declared := false
	for _, s := range info.Attrs {
		if s.Name == name {
			if s.Kind != kind {
				panic(fmt.Sprintf("lcc: BUG: %s attribute %s is %v, read as %v", n.Op, name, s.Kind, kind))
			}
			declared = true
		}
	}
	if !declared {
		panic(fmt.Sprintf("lcc: BUG: %s has no attribute %s", n.Op, name))
	}
	if v, ok := n.Attrs.Get(name); ok {
		return v
	}
	v, _ := info.Defaults.Get(name)
	return v
}

// AttrBool returns n's bool attribute name (false when absent).
func (n *Node) AttrBool(name string) bool { b, _ := n.attr(name, AttrBool).(bool); return b }

// AttrInt returns n's int attribute name, or the default of n's op.
func (n *Node) AttrInt(name string) int64 { i, _ := n.attr(name, AttrInt).(int64); return i }

// AttrInts returns n's ints attribute name, or the default of n's op.
func (n *Node) AttrInts(name string) []int64 { x, _ := n.attr(name, AttrInts).([]int64); return x }

// AttrFloat returns n's float attribute name, or the default of n's op.
func (n *Node) AttrFloat(name string) float64 {
	f, _ := n.attr(name, AttrFloat).(float64)
	return f
}

// AttrFloats returns n's floats attribute name, or the default of n's op.
func (n *Node) AttrFloats(name string) []float64 {
	x, _ := n.attr(name, AttrFloats).([]float64)
	return x
}

// AttrString returns n's string attribute name, or the default of n's op.
func (n *Node) AttrString(name string) string {
	s, _ := n.attr(name, AttrString).(string)
	return s
}

// AttrTensor returns n's tensor attribute name (nil when absent).
func (n *Node) AttrTensor(name string) *tensor.Tensor {
	t, _ := n.attr(name, AttrTensor).(*tensor.Tensor)
	return t
}

// AttrDType returns n's dtype attribute name, or the default of n's op
// (tensor.Invalid when it has none).
func (n *Node) AttrDType(name string) tensor.DType {
	d, _ := n.attr(name, AttrDType).(tensor.DType)
	return d
}

// AttentionScale is the softmax scale s of an attention-family node (q first,
// [B, T, H, D]): its scale attribute, else 1/√D (docs/design.md §3).
func AttentionScale(n *Node) float64 {
	if v, ok := n.Attrs.Get("scale"); ok {
		if f, ok := v.(float64); ok {
			return f
		}
	}
	return 1 / math.Sqrt(float64(n.Args[0].Type.Shape[3]))
}
