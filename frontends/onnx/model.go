package onnx

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/lcc-dev/lcc/tensor"
)

// Model is a decoded, validated ONNX model. See the package doc for its invariants.
type Model struct {
	// Source is the file the model came from (LoadOptions.Source), used in errors.
	Source string
	// IRVersion is ModelProto.ir_version.
	IRVersion int64
	// ProducerName and ProducerVersion say which tool wrote the file.
	ProducerName, ProducerVersion string
	// Opsets maps each imported domain ("" for the default ai.onnx domain) to its
	// opset version.
	Opsets map[string]int64
	// Graph is the main graph.
	Graph Graph
	// Functions are the model-local functions (ModelProto.functions). A node whose
	// domain and op type name one of them calls it; lcc does not inline them, so the
	// lowering reports such nodes as unsupported ops.
	Functions []Function
}

// Graph is a decoded GraphProto.
type Graph struct {
	// Name is the graph's name.
	Name string
	// Nodes are in topological order.
	Nodes []Node
	// Inputs are the graph inputs in file order. An input that is also an
	// initializer is an input with a default value (IR version 3 style).
	Inputs []ValueInfo
	// Outputs are the graph outputs in file order.
	Outputs []ValueInfo
	// ValueInfo holds the file's optional type annotations of intermediate values.
	// Unlike Inputs and Outputs, an entry may have DType tensor.Invalid when the file
	// gives no type or one lcc does not support.
	ValueInfo []ValueInfo
	// Initializers maps each initializer's name to its value.
	Initializers map[string]*tensor.Tensor
	// InitializerNames lists the initializers in file order.
	InitializerNames []string
	// InlineBytes is the size of the initializers' data held in the file
	// itself (raw_data), not in external data.
	InlineBytes int64
	// Metadata holds the graph's metadata_props (PyTorch's exporter records the
	// ExportedProgram's graph signature here: which inputs were parameters).
	Metadata map[string]string
}

// Node is one operator call.
type Node struct {
	// Name is the node's name; it may be empty (ONNX does not require one).
	Name string
	// OpType is the operator, e.g. "MatMul".
	OpType string
	// Domain is the operator set domain; "" is the default domain (ai.onnx).
	Domain string
	// Inputs are the input value names; "" marks an absent optional input.
	Inputs []string
	// Outputs are the output value names; "" marks an unused optional output.
	Outputs []string
	// Attrs are the node's attributes by name.
	Attrs map[string]Attr
	// Metadata holds the node's metadata_props (PyTorch's exporter records the FX
	// node it came from under "pkg.torch.onnx.fx_node").
	Metadata map[string]string
}

// String describes the node for messages: `node "name" (OpType)`, or, for a node
// without a name, `node (OpType) producing "out"`.
func (n *Node) String() string {
	// Names come from the file: a megabyte name prints as its first kilobyte.
	if n.Name != "" {
		return fmt.Sprintf("node %s (%s)", tensor.Brief(strconv.Quote(n.Name)),
			tensor.Brief(n.opLabel()))
	}
	for _, o := range n.Outputs {
		if o != "" {
			return fmt.Sprintf("node (%s) producing %s", tensor.Brief(n.opLabel()),
				tensor.Brief(strconv.Quote(o)))
		}
	}
	return fmt.Sprintf("unnamed node (%s)", tensor.Brief(n.opLabel()))
}

func (n *Node) opLabel() string {
	if n.Domain == "" {
		return n.OpType
	}
	return n.Domain + "." + n.OpType
}

// AttrKind says which field of an Attr holds its value.
type AttrKind uint8

// The attribute kinds. AttrUnsupported covers ONNX attribute types lcc does not
// decode (graphs, sparse tensors, type protos, lists of tensors or graphs); the
// lowering reports them if the op needs them.
const (
	AttrInvalid AttrKind = iota
	AttrInt
	AttrFloat
	AttrString
	AttrInts
	AttrFloats
	AttrStrings
	AttrTensor
	AttrUnsupported
)

var attrKindNames = [...]string{AttrInvalid: "invalid", AttrInt: "int", AttrFloat: "float",
	AttrString: "string", AttrInts: "ints", AttrFloats: "floats", AttrStrings: "strings",
	AttrTensor: "tensor", AttrUnsupported: "unsupported"}

// String returns the kind's name ("int", "floats", ...).
func (k AttrKind) String() string {
	if int(k) < len(attrKindNames) {
		return attrKindNames[k]
	}
	return fmt.Sprintf("AttrKind(%d)", uint8(k))
}

// Attr is a typed attribute value. Only the field named by Kind is meaningful.
type Attr struct {
	// Kind says which field holds the value.
	Kind AttrKind
	// Int is the value of an AttrInt.
	Int int64
	// Float is the value of an AttrFloat (ONNX stores float32; the conversion is
	// exact).
	Float float64
	// String is the value of an AttrString.
	String string
	// Ints is the value of an AttrInts.
	Ints []int64
	// Floats is the value of an AttrFloats.
	Floats []float64
	// Strings is the value of an AttrStrings.
	Strings []string
	// Tensor is the value of an AttrTensor.
	Tensor *tensor.Tensor
	// ProtoType is the ONNX attribute type name ("GRAPH", "SPARSE_TENSOR", ...) of
	// an AttrUnsupported.
	ProtoType string
	// Ref is the ref_attr_name of an attribute inside a function body: the value
	// is the calling node's attribute of that name. Kind still gives the type.
	Ref string
}

// ValueInfo is the name and tensor type of a graph input, output or annotation.
type ValueInfo struct {
	// Name is the value's name.
	Name string
	// DType is the element type.
	DType tensor.DType
	// Dims is the shape; nil with HasShape false when the file gives no shape
	// (rank unknown), empty with HasShape true for a scalar.
	Dims []Dim
	// HasShape reports whether the file gives a shape at all.
	HasShape bool
	// Metadata holds the value's metadata_props (exporters record provenance
	// here, e.g. onnxscript's "pkg.onnxscript.optimizer.folded_from").
	Metadata map[string]string
}

// Dim is one dimension of a ValueInfo: a known size, a symbolic name, or unknown.
type Dim struct {
	// Value is the size when Known.
	Value int64
	// Param is the symbolic name (ONNX dim_param, e.g. "batch") when not Known; ""
	// means an anonymous unknown dim.
	Param string
	// Known reports whether Value holds the size (ONNX dim_value).
	Known bool
}

// String formats the dim as its size, its name, or "?".
func (d Dim) String() string {
	switch {
	case d.Known:
		return fmt.Sprint(d.Value)
	case d.Param != "":
		return d.Param
	}
	return "?"
}

// Function is a model-local function (FunctionProto).
type Function struct {
	// Name and Domain identify the function; a node with that op type and domain
	// calls it. Overload distinguishes overloads (IR version 10).
	Name, Domain, Overload string
	// Inputs and Outputs are the formal parameter names.
	Inputs, Outputs []string
	// AttrNames are the names of the function's attributes (with or without
	// defaults).
	AttrNames []string
	// Nodes is the body in topological order.
	Nodes []Node
	// Opsets are the function's own opset imports.
	Opsets map[string]int64
}

// OpKey identifies an operator as the lowering looks it up.
type OpKey struct {
	// Domain is the op's domain ("" for ai.onnx).
	Domain string
	// OpType is the op's name.
	OpType string
	// Opset is the model's opset version for Domain (0 if the domain is not
	// imported, as for a call to a local function in an unimported domain).
	Opset int64
}

// OpsUsed returns the distinct operators the main graph uses, sorted by domain,
// op type and opset. Calls of local functions are included under their own
// domain and name (see IsLocalFunction).
func (m *Model) OpsUsed() []OpKey {
	seen := map[OpKey]bool{}
	var out []OpKey
	for i := range m.Graph.Nodes {
		n := &m.Graph.Nodes[i]
		k := OpKey{Domain: n.Domain, OpType: n.OpType, Opset: m.Opsets[n.Domain]}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		if a.OpType != b.OpType {
			return a.OpType < b.OpType
		}
		return a.Opset < b.Opset
	})
	return out
}

// IsLocalFunction reports whether domain and opType name a function of the model.
func (m *Model) IsLocalFunction(domain, opType string) bool {
	return m.Function(domain, opType) != nil
}

// Function returns the model-local function named opType in domain, or nil.
func (m *Model) Function(domain, opType string) *Function {
	for i := range m.Functions {
		if f := &m.Functions[i]; f.Domain == domain && f.Name == opType {
			return f
		}
	}
	return nil
}
