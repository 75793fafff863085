// Package hostile builds small ONNX models whose contents ask lcc for too much: sizes
// that would allocate terabytes, axes out of range, integer division by zero at
// folding time, attribute lists of millions of entries. Each Case says which node
// the error must name. The importer's tests (frontends/onnx) and the command-line
// tests (cmd/lcc) both run every case, so a new hostile input is added once here.
//
// The models are a few hundred bytes: the sizes are in attributes and constants,
// never in data. Only tests use this package.
package hostile

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
)

// Case is one hostile model and what lcc must say about it.
type Case struct {
	Name string // a short name, also the file name's stem
	// Node is the name of the node (or input) that the error must name.
	Node string
	// Want is a fragment the error must hold besides the node's name.
	Want string
	// Run is true when the model imports and compiles (a plan for GPUs may be as
	// large as it likes) and only a run on the host (lcc check, lcc run) refuses it,
	// naming the node where its host peak falls. Such models read at most an input
	// x f32[2,3].
	Run bool
	// OK is true for a model that looks hostile but is valid (bounds at the ends of
	// int64 that ONNX clamps): it compiles, and only a crash would be wrong.
	OK   bool
	Spec Model
}

// Model is a graph in a few lines: its nodes, initializers, inputs and outputs.
type Model struct {
	Nodes   []*onnxpb.NodeProto
	Inits   []*onnxpb.TensorProto
	Inputs  []*onnxpb.ValueInfoProto
	Outputs []string // names; their types are left to inference
}

// Bytes is the serialised model (opset 18).
func (m Model) Bytes() []byte {
	g := &onnxpb.GraphProto{Name: proto.String("hostile"), Node: m.Nodes, Initializer: m.Inits,
		Input: m.Inputs}
	for _, o := range m.Outputs {
		// An f32 tensor of unknown shape: the importer infers the rest.
		g.Output = append(g.Output, &onnxpb.ValueInfoProto{Name: proto.String(o), Type: &onnxpb.TypeProto{
			Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
				ElemType: proto.Int32(int32(f32))}}}})
	}
	b, err := proto.Marshal(&onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}}})
	if err != nil {
		panic("lcc: BUG: hostile: " + err.Error())
	}
	return b
}

// N is a node named name: op(ins...) -> outs, with attributes.
func N(name, op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{Name: proto.String(name), OpType: proto.String(op), Input: ins,
		Output: outs, Attribute: attrs}
}

// Int is an integer attribute.
func Int(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// Ints is an integer-list attribute.
func Ints(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

// I64 is an i64 initializer of the given dims.
func I64(name string, dims []int64, v ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)),
		Dims: dims, Int64Data: v}
}

// F32 is an f32 initializer of the given dims.
func F32(name string, dims []int64, v ...float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)),
		Dims: dims, FloatData: v}
}

// Input is a model input of element type elem and fixed dims.
func Input(name string, elem onnxpb.TensorProto_DataType, dims ...int64) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{
			Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{
		Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
			ElemType: proto.Int32(int32(elem)), Shape: shape}}}}
}

const f32 = onnxpb.TensorProto_FLOAT

// x is the f32[2,3] input most cases read.
var x = Input("x", f32, 2, 3)

// unary is a model y = op(x) {attrs} on x f32[2,3].
func unary(op string, attrs ...*onnxpb.AttributeProto) Model {
	return Model{Nodes: []*onnxpb.NodeProto{N("bad", op, []string{"x"}, []string{"y"}, attrs...)},
		Inputs: []*onnxpb.ValueInfoProto{x}, Outputs: []string{"y"}}
}

// withConst is a model y = op(x, c) on x f32[2,3] with c an i64 initializer.
func withConst(op string, c *onnxpb.TensorProto, attrs ...*onnxpb.AttributeProto) Model {
	return Model{Nodes: []*onnxpb.NodeProto{N("bad", op, []string{"x", c.GetName()}, []string{"y"}, attrs...)},
		Inits: []*onnxpb.TensorProto{c}, Inputs: []*onnxpb.ValueInfoProto{x}, Outputs: []string{"y"}}
}

// folded is a model whose node "bad" = op(a, b) reads only constants, so the
// importer folds it; y = x + bad keeps it live.
func folded(op string, a, b *onnxpb.TensorProto) Model {
	return Model{
		Nodes: []*onnxpb.NodeProto{
			N("bad", op, []string{a.GetName(), b.GetName()}, []string{"c"}),
			N("cast", "Cast", []string{"c"}, []string{"cf"}, Int("to", int64(f32))),
			N("add", "Add", []string{"x", "cf"}, []string{"y"}),
		},
		Inits: []*onnxpb.TensorProto{a, b}, Inputs: []*onnxpb.ValueInfoProto{x}, Outputs: []string{"y"}}
}

// Cases is every hostile model.
func Cases() []Case {
	const tera = 1 << 40
	var cs []Case
	// Sizes: the importer and folding must refuse them before allocating.
	cs = append(cs,
		Case{Name: "pad_const_huge", Node: "bad", Want: "host memory", Run: true, Spec: Model{
			Nodes:   []*onnxpb.NodeProto{N("bad", "Pad", []string{"c", "pads"}, []string{"y"})},
			Inits:   []*onnxpb.TensorProto{F32("c", []int64{1}, 1), I64("pads", []int64{2}, 0, tera)},
			Outputs: []string{"y"}}},
		Case{Name: "pad_huge", Node: "bad", Want: "host memory", Run: true,
			Spec: withConst("Pad", I64("pads", []int64{4}, 0, 0, 0, 1<<31))},
		Case{Name: "constant_of_shape_cos", Node: "cos", Want: "host memory", Run: true, Spec: Model{
			Nodes: []*onnxpb.NodeProto{
				N("big", "ConstantOfShape", []string{"shape"}, []string{"z"}),
				N("cos", "Cos", []string{"z"}, []string{"y"}),
			},
			Inits: []*onnxpb.TensorProto{I64("shape", []int64{1}, 1<<28)}, Outputs: []string{"y"}}},
		Case{Name: "tile_huge", Node: "bad", Want: "host memory", Run: true,
			Spec: withConst("Tile", I64("repeats", []int64{2}, 1<<14, 1<<14))},
		Case{Name: "expand_huge", Node: "bad", Want: "host memory", Run: true,
			Spec: withConst("Expand", I64("shape", []int64{3}, 1<<26, 2, 3))},
		Case{Name: "tile_overflow", Node: "bad", Want: "elements",
			Spec: withConst("Tile", I64("repeats", []int64{2}, 1<<40, 1<<40))},
		Case{Name: "range_huge", Node: "bad", Want: "elements", Spec: Model{
			Nodes:   []*onnxpb.NodeProto{N("bad", "Range", []string{"s", "l", "d"}, []string{"y"})},
			Inits:   []*onnxpb.TensorProto{I64("s", nil, 0), I64("l", nil, 1<<62), I64("d", nil, 1)},
			Outputs: []string{"y"}}},
		Case{Name: "constant_of_shape_overflow", Node: "bad", Want: "elements", Spec: Model{
			Nodes: []*onnxpb.NodeProto{N("bad", "ConstantOfShape", []string{"shape"}, []string{"y"})},
			Inits: []*onnxpb.TensorProto{I64("shape", []int64{3}, tera, tera, tera)}, Outputs: []string{"y"}}},
		Case{Name: "reshape_overflow", Node: "bad", Want: "elements",
			Spec: withConst("Reshape", I64("shape", []int64{3}, tera, tera, tera))},
	)
	// Axes out of range, at any op that has one.
	for _, ax := range []int64{7, -5, -1 << 63} {
		cs = append(cs,
			Case{Name: fmt.Sprintf("softmax_axis_%d", ax), Node: "bad", Want: "axis", Spec: unary("Softmax", Int("axis", ax))},
			Case{Name: fmt.Sprintf("cumsum_axis_%d", ax), Node: "bad", Want: "axis",
				Spec: withConst("CumSum", I64("axis", nil, ax))},
		)
	}
	cs = append(cs,
		Case{Name: "log_softmax_axis", Node: "bad", Want: "axis", Spec: unary("LogSoftmax", Int("axis", 2))},
		Case{Name: "hardmax_axis", Node: "bad", Want: "axis", Spec: unary("Hardmax", Int("axis", 9))},
		Case{Name: "flatten_axis", Node: "bad", Want: "axis", Spec: unary("Flatten", Int("axis", 3))},
		Case{Name: "argmax_axis", Node: "bad", Want: "axis", Spec: unary("ArgMax", Int("axis", 2))},
		Case{Name: "concat_axis", Node: "bad", Want: "axis", Spec: unary("Concat", Int("axis", 2))},
		Case{Name: "split_axis", Node: "bad", Want: "axis", Spec: unary("Split", Int("axis", -3), Int("num_outputs", 1))},
		Case{Name: "gather_axis", Node: "bad", Want: "axis",
			Spec: withConst("Gather", I64("i", []int64{1}, 0), Int("axis", 5))},
		Case{Name: "reduce_axes", Node: "bad", Want: "axis",
			Spec: withConst("ReduceSum", I64("axes", []int64{1}, 4))},
		Case{Name: "unsqueeze_axes", Node: "bad", Want: "axis",
			Spec: withConst("Unsqueeze", I64("axes", []int64{1}, 3))},
		Case{Name: "squeeze_axes", Node: "bad", Want: "axis",
			Spec: withConst("Squeeze", I64("axes", []int64{1}, -3))},
		Case{Name: "transpose_perm_range", Node: "bad", Want: "perm", Spec: unary("Transpose", Ints("perm", 0, 2))},
		// 2^18 entries (the had five million): the message must stay short.
		Case{Name: "transpose_perm_long", Node: "bad", Want: "perm", Spec: unary("Transpose", Ints("perm", longList(1<<18)...))},
		Case{Name: "reshape_long", Node: "bad", Want: "rank",
			Spec: withConst("Reshape", I64("shape", []int64{1 << 20}, longList(1<<20)...))},
	)
	// More attributes and constants that index, count or step.
	const minInt = -1 << 63
	cs = append(cs,
		Case{Name: "gather_elements_axis", Node: "bad", Want: "axis", Spec: Model{
			Nodes: []*onnxpb.NodeProto{N("bad", "GatherElements", []string{"x", "i"}, []string{"y"}, Int("axis", minInt))},
			Inits: []*onnxpb.TensorProto{I64("i", []int64{2, 3}, 0, 0, 0, 0, 0, 0)}, Inputs: []*onnxpb.ValueInfoProto{x},
			Outputs: []string{"y"}}},
		Case{Name: "layer_norm_axis", Node: "bad", Want: "axis", Spec: unary("LayerNormalization", Int("axis", 5))},
		Case{Name: "rms_norm_axis", Node: "bad", Want: "axis", Spec: unary("RMSNormalization", Int("axis", minInt))},
		Case{Name: "argmin_axis_min", Node: "bad", Want: "axis", Spec: unary("ArgMin", Int("axis", minInt))},
		Case{Name: "split_num_outputs", Node: "bad", Want: "split", Spec: unary("Split", Int("axis", 1), Int("num_outputs", 1<<62))},
		Case{Name: "split_sizes_long", Node: "bad", Want: "split",
			Spec: withConst("Split", I64("s", []int64{1 << 20}, longList(1<<20)...), Int("axis", 1))},
		Case{Name: "tile_repeats_long", Node: "bad", Want: "repeats",
			Spec: withConst("Tile", I64("r", []int64{1 << 20}, longList(1<<20)...))},
		Case{Name: "unsqueeze_axes_long", Node: "bad", Want: "axis",
			Spec: withConst("Unsqueeze", I64("axes", []int64{1 << 20}, make([]int64, 1<<20)...))},
		Case{Name: "reduce_axes_min", Node: "bad", Want: "axis",
			Spec: withConst("ReduceLogSumExp", I64("axes", []int64{1}, minInt))},
		Case{Name: "flatten_axis_min", Node: "bad", Want: "axis", Spec: unary("Flatten", Int("axis", minInt))},
		Case{Name: "softmax_opset11_axis", Node: "bad", Want: "axis", Spec: unary("Softmax", Int("axis", 1<<62))},
	)
	// A node name of a megabyte: messages print its first kilobyte.
	long := N(strings.Repeat("n", 1<<20), "Softmax", []string{"x"}, []string{"y"}, Int("axis", 9))
	cs = append(cs, Case{Name: "node_name_long", Node: "nnnnnnnn", Want: "axis", Spec: Model{
		Nodes: []*onnxpb.NodeProto{long}, Inputs: []*onnxpb.ValueInfoProto{x}, Outputs: []string{"y"}}})
	ones := make([]int64, 1<<17)
	for i := range ones {
		ones[i] = 1
	}
	cs = append(cs, Case{Name: "input_rank_huge", Node: "x", Want: "rank", Spec: Model{
		Nodes:  []*onnxpb.NodeProto{N("bad", "MatMul", []string{"x", "x"}, []string{"y"})},
		Inputs: []*onnxpb.ValueInfoProto{Input("x", f32, ones...)}, Outputs: []string{"y"}}})
	for _, sl := range [][]int64{{0, 1, 1, minInt}, {minInt, minInt, 1, -1}, {0, 1 << 62, 1, 1 << 62}, {0, 1, minInt, 1}} {
		// starts, ends, axes and steps at the ends of int64; Slice either clamps them
		// or names the node.
		cs = append(cs, Case{Name: fmt.Sprintf("slice_%d_%d_%d_%d", sl[0], sl[1], sl[2], sl[3]), Node: "bad",
			Want: "axis", OK: sl[2] == 1, Spec: Model{
				Nodes: []*onnxpb.NodeProto{N("bad", "Slice", []string{"x", "s", "e", "a", "st"}, []string{"y"})},
				Inits: []*onnxpb.TensorProto{I64("s", []int64{1}, sl[0]), I64("e", []int64{1}, sl[1]),
					I64("a", []int64{1}, sl[2]), I64("st", []int64{1}, sl[3])},
				Inputs: []*onnxpb.ValueInfoProto{x}, Outputs: []string{"y"}}})
	}
	// Folding errors: integer division by zero, out-of-range axes on constants.
	cs = append(cs,
		Case{Name: "fold_div_zero", Node: "bad", Want: "division by zero",
			Spec: folded("Div", I64("a", []int64{2}, 1, 2), I64("b", []int64{2}, 1, 0))},
		Case{Name: "fold_mod_zero", Node: "bad", Want: "division by zero",
			Spec: folded("Mod", I64("a", []int64{2}, 1, 2), I64("b", []int64{2}, 0, 1))},
		Case{Name: "fold_cumsum_axis", Node: "bad", Want: "axis",
			Spec: folded("CumSum", I64("a", []int64{2}, 1, 2), I64("b", nil, 3))},
	)
	return cs
}

// longList is 0, 1, ..., n-1.
func longList(n int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = int64(i)
	}
	return v
}
