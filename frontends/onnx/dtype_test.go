package onnx

import (
	"encoding/binary"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/tensor"
)

// Each supported dtype decodes from raw_data and from its typed field to the
// same values.
func TestDTypes(t *testing.T) {
	le := binary.LittleEndian
	cases := []struct {
		onnx  onnxpb.TensorProto_DataType
		dt    tensor.DType
		raw   []byte
		typed func(tp *onnxpb.TensorProto)
		f     []float64
		i     []int64
	}{
		{onnxpb.TensorProto_FLOAT, tensor.F32, f32Raw(1.5, -2),
			func(tp *onnxpb.TensorProto) { tp.FloatData = []float32{1.5, -2} }, []float64{1.5, -2}, nil},
		{onnxpb.TensorProto_DOUBLE, tensor.F64,
			le.AppendUint64(le.AppendUint64(nil, math.Float64bits(0.1)), math.Float64bits(-3)),
			func(tp *onnxpb.TensorProto) { tp.DoubleData = []float64{0.1, -3} }, []float64{0.1, -3}, nil},
		// f16 1.5 = 0x3e00, -2 = 0xc000; bf16 1.5 = 0x3fc0, -2 = 0xc000.
		{onnxpb.TensorProto_FLOAT16, tensor.F16, []byte{0x00, 0x3e, 0x00, 0xc0},
			func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{0x3e00, 0xc000} }, []float64{1.5, -2}, nil},
		{onnxpb.TensorProto_BFLOAT16, tensor.BF16, []byte{0xc0, 0x3f, 0x00, 0xc0},
			func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{0x3fc0, 0xc000} }, []float64{1.5, -2}, nil},
		{onnxpb.TensorProto_INT64, tensor.I64, le.AppendUint64(le.AppendUint64(nil, 7), uint64(1<<63)),
			func(tp *onnxpb.TensorProto) { tp.Int64Data = []int64{7, math.MinInt64} }, nil, []int64{7, math.MinInt64}},
		{onnxpb.TensorProto_INT32, tensor.I32, le.AppendUint32(le.AppendUint32(nil, 7), 0xffffffff),
			func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{7, -1} }, nil, []int64{7, -1}},
		{onnxpb.TensorProto_INT8, tensor.I8, []byte{0x7f, 0x80},
			func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{127, -128} }, nil, []int64{127, -128}},
		{onnxpb.TensorProto_UINT8, tensor.U8, []byte{0, 255},
			func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{0, 255} }, nil, []int64{0, 255}},
		{onnxpb.TensorProto_BOOL, tensor.Bool, []byte{1, 0},
			func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{1, 0} }, nil, []int64{1, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.dt.String(), func(t *testing.T) {
			raw := rawTensor("r", tc.onnx, []int64{2}, tc.raw)
			typed := rawTensor("t", tc.onnx, []int64{2}, nil)
			tc.typed(typed)
			m := tinyModel()
			m.Graph.Initializer = append(m.Graph.Initializer, raw, typed)
			got, err := Decode(marshal(t, m), "", LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var want *tensor.Tensor
			if tc.f != nil {
				want = tensor.FromFloats(tc.dt, []int64{2}, tc.f)
			} else {
				want = tensor.FromInts(tc.dt, []int64{2}, tc.i)
			}
			for _, name := range []string{"r", "t"} {
				if g := got.Graph.Initializers[name]; !tensor.Equal(g, want) {
					t.Errorf("%s: got %+v, want %+v", name, g, want)
				}
			}
			if dt, ok := DType(int32(tc.onnx)); !ok || dt != tc.dt {
				t.Errorf("DType(%d) = %v, %v", tc.onnx, dt, ok)
			}
		})
	}
	if _, ok := DType(int32(onnxpb.TensorProto_STRING)); ok {
		t.Error("DType(STRING) reported supported")
	}
}

func TestInt8OutOfRange(t *testing.T) {
	m := tinyModel()
	tp := rawTensor("b", onnxpb.TensorProto_INT8, []int64{1}, nil)
	tp.Int32Data = []int32{300}
	m.Graph.Initializer = append(m.Graph.Initializer, tp)
	if _, err := Decode(marshal(t, m), "", LoadOptions{}); err == nil {
		t.Error("int8 300 accepted")
	}
}

// Attributes of every kind decode; the unsupported kinds are kept, not refused.
func TestAttributes(t *testing.T) {
	m := tinyModel()
	attr := func(name string, typ onnxpb.AttributeProto_AttributeType, f func(a *onnxpb.AttributeProto)) *onnxpb.AttributeProto {
		a := &onnxpb.AttributeProto{Name: proto.String(name), Type: typ.Enum()}
		f(a)
		return a
	}
	m.Graph.Node[1].Attribute = []*onnxpb.AttributeProto{
		attr("i", onnxpb.AttributeProto_INT, func(a *onnxpb.AttributeProto) { a.I = proto.Int64(-3) }),
		attr("f", onnxpb.AttributeProto_FLOAT, func(a *onnxpb.AttributeProto) { a.F = proto.Float32(0.25) }),
		attr("s", onnxpb.AttributeProto_STRING, func(a *onnxpb.AttributeProto) { a.S = []byte("tanh") }),
		attr("is", onnxpb.AttributeProto_INTS, func(a *onnxpb.AttributeProto) { a.Ints = []int64{1, 2} }),
		attr("fs", onnxpb.AttributeProto_FLOATS, func(a *onnxpb.AttributeProto) { a.Floats = []float32{0.5} }),
		attr("ss", onnxpb.AttributeProto_STRINGS, func(a *onnxpb.AttributeProto) { a.Strings = [][]byte{[]byte("a")} }),
		attr("t", onnxpb.AttributeProto_TENSOR, func(a *onnxpb.AttributeProto) {
			a.T = rawTensor("", onnxpb.TensorProto_FLOAT, nil, f32Raw(2))
		}),
		attr("g", onnxpb.AttributeProto_GRAPH, func(a *onnxpb.AttributeProto) { a.G = &onnxpb.GraphProto{} }),
		// No type: inferred from the field that is set (IR version 1 files).
		{Name: proto.String("old"), I: proto.Int64(5)},
	}
	got, err := Decode(marshal(t, m), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := got.Graph.Nodes[1].Attrs
	if a["i"].Kind != AttrInt || a["i"].Int != -3 || a["f"].Float != 0.25 || a["s"].String != "tanh" ||
		len(a["is"].Ints) != 2 || a["fs"].Floats[0] != 0.5 || a["ss"].Strings[0] != "a" ||
		a["t"].Tensor.F[0] != 2 || len(a["t"].Tensor.Shape) != 0 || a["old"].Int != 5 {
		t.Errorf("attrs %+v", a)
	}
	if g := a["g"]; g.Kind != AttrUnsupported || g.ProtoType != "GRAPH" {
		t.Errorf("graph attr %+v", g)
	}
}

// Unsorted acyclic graphs are sorted stably; empty names mean absent optionals.
func TestTopologicalSortAndOptionals(t *testing.T) {
	m := tinyModel()
	g := m.Graph
	// Reverse the nodes and add an independent node with an absent optional input
	// and an unused optional output.
	g.Node = []*onnxpb.NodeProto{
		g.Node[1], g.Node[0],
		node("clip", "Clip", []string{"x", "", ""}, []string{"c"}),
		node("drop", "Dropout", []string{"c"}, []string{"d", ""}),
	}
	got, err := Decode(marshal(t, m), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, n := range got.Graph.Nodes {
		order = append(order, n.Name)
	}
	// mm is the first ready node; relu becomes ready after it but clip, earlier in
	// the file than drop, is ready from the start.
	if want := "mm relu clip drop"; joinNames(order) != want {
		t.Errorf("order %q, want %q", joinNames(order), want)
	}
}

func joinNames(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// Local functions are decoded, and their calls show up in OpsUsed.
func TestFunctions(t *testing.T) {
	m := tinyModel()
	m.OpsetImport = append(m.OpsetImport,
		&onnxpb.OperatorSetIdProto{Domain: proto.String("com.microsoft"), Version: proto.Int64(1)})
	m.Functions = []*onnxpb.FunctionProto{{
		Name: proto.String("Swish"), Domain: proto.String("lcc.test"),
		Input: []string{"a"}, Output: []string{"b"},
		Node: []*onnxpb.NodeProto{
			node("s", "Sigmoid", []string{"a"}, []string{"sa"}),
			node("m", "Mul", []string{"a", "sa"}, []string{"b"}),
		},
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}},
	}}
	call := node("sw", "Swish", []string{"y"}, []string{"z"})
	call.Domain = proto.String("lcc.test")
	ms := node("gelu", "FastGelu", []string{"z"}, []string{"z2"})
	ms.Domain = proto.String("com.microsoft")
	m.Graph.Node = append(m.Graph.Node, call, ms)
	m.Graph.Output[0].Name = proto.String("z2")
	got, err := Decode(marshal(t, m), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Functions) != 1 || len(got.Functions[0].Nodes) != 2 || !got.IsLocalFunction("lcc.test", "Swish") {
		t.Fatalf("functions %+v", got.Functions)
	}
	want := []OpKey{{"", "MatMul", 18}, {"", "Relu", 18}, {"com.microsoft", "FastGelu", 1},
		{"lcc.test", "Swish", 0}}
	ops := got.OpsUsed()
	if len(ops) != len(want) {
		t.Fatalf("OpsUsed %v, want %v", ops, want)
	}
	for i := range want {
		if ops[i] != want[i] {
			t.Errorf("OpsUsed[%d] = %v, want %v", i, ops[i], want[i])
		}
	}

	// A cycle inside a function body is reported with the function's name.
	m.Functions[0].Node[0].Input[0] = "b"
	if _, err := Decode(marshal(t, m), "", LoadOptions{}); err == nil ||
		!contains(err.Error(), `function #0 "Swish"`, "cycle") {
		t.Errorf("cyclic function: %v", err)
	}
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !containsOne(s, sub) {
			return false
		}
	}
	return true
}

func containsOne(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
