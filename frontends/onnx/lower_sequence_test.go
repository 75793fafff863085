package onnx

import (
	"encoding/binary"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/tensor"
)

// sequenceModel splits x f32[4,6] into chunks of 2 columns (SplitToSequence),
// takes the last and the first (SequenceAt -1 and 0), and returns them
// concatenated in that order (SequenceConstruct, ConcatFromSequence) as y
// [4,4], all three chunks stacked on a new axis 0 as z [3,4,2], and the
// sequence's length as n. edit changes the graph before it is returned.
func sequenceModel(edit func(g *onnxpb.GraphProto)) *onnxpb.ModelProto {
	i64 := func(name string, v int64) *onnxpb.TensorProto {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, uint64(v))
		return rawTensor(name, onnxpb.TensorProto_INT64, nil, b)
	}
	attr := func(n *onnxpb.NodeProto, name string, v int64) *onnxpb.NodeProto {
		n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String(name),
			Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)})
		return n
	}
	f32 := onnxpb.TensorProto_FLOAT
	g := &onnxpb.GraphProto{
		Name: proto.String("seq"),
		Node: []*onnxpb.NodeProto{
			attr(node("split", "SplitToSequence", []string{"x", "two"}, []string{"s"}), "axis", 1),
			node("last", "SequenceAt", []string{"s", "minus_one"}, []string{"a"}),
			node("first", "SequenceAt", []string{"s", "zero"}, []string{"b"}),
			node("pair", "SequenceConstruct", []string{"a", "b"}, []string{"ab"}),
			attr(node("cat", "ConcatFromSequence", []string{"ab"}, []string{"y"}), "axis", 1),
			attr(attr(node("stack", "ConcatFromSequence", []string{"s"}, []string{"z"}), "axis", 0), "new_axis", 1),
			node("len", "SequenceLength", []string{"s"}, []string{"n"}),
		},
		Initializer: []*onnxpb.TensorProto{i64("two", 2), i64("minus_one", -1), i64("zero", 0)},
		Input:       []*onnxpb.ValueInfoProto{valueInfo("x", tensorType(f32, 4, 6))},
		Output: []*onnxpb.ValueInfoProto{valueInfo("y", tensorType(f32, 4, 4)),
			valueInfo("z", tensorType(f32, 3, 4, 2)), valueInfo("n", tensorType(onnxpb.TensorProto_INT64))},
	}
	if edit != nil {
		edit(g)
	}
	return &onnxpb.ModelProto{IrVersion: proto.Int64(10), Graph: g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}}}
}

// TestSequenceOps: sequences with positions known at compile time lower to split
// and concat, and compute what ONNX defines.
func TestSequenceOps(t *testing.T) {
	m, err := Decode(marshal(t, sequenceModel(nil)), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Import(m, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.New(tensor.F32, 4, 6)
	for i := range x.F {
		x.F[i] = float64(i)
	}
	outs, err := interp.Run(f, map[string]*tensor.Tensor{"x": x}, interp.Options{Precision: tensor.F32})
	if err != nil {
		t.Fatal(err)
	}
	for r := range 4 {
		for c := range 4 {
			// y = [x[:, 4:6], x[:, 0:2]]
			want := float64(r*6 + (c+4)%6)
			if c >= 2 {
				want = float64(r*6 + c - 2)
			}
			if got := outs["y"].F[r*4+c]; got != want {
				t.Fatalf("y[%d,%d] = %v, want %v", r, c, got, want)
			}
		}
	}
	for k := range 3 {
		for r := range 4 {
			for c := range 2 {
				if got, want := outs["z"].F[(k*4+r)*2+c], float64(r*6+2*k+c); got != want {
					t.Fatalf("z[%d,%d,%d] = %v, want %v", k, r, c, got, want)
				}
			}
		}
	}
	if n := outs["n"]; n.Numel() != 1 || n.Int(0) != 3 {
		t.Errorf("n = %v, want 3", n)
	}
}

// TestSequenceErrors: a position known only at run time, one past the end, and a
// sequence read as a tensor are errors naming the node, not panics.
func TestSequenceErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(g *onnxpb.GraphProto)
		want string
	}{
		{"run-time position", func(g *onnxpb.GraphProto) {
			g.Node[1].Input[1] = "p"
			g.Input = append(g.Input, valueInfo("p", tensorType(onnxpb.TensorProto_INT64)))
		}, `"last"`},
		{"past the end", func(g *onnxpb.GraphProto) { g.Initializer[2].RawData[0] = 5 },
			"position 5 is outside a sequence of 3"},
		{"sequence as a tensor", func(g *onnxpb.GraphProto) { g.Node[4].OpType = proto.String("Identity") },
			`value "ab" is a sequence`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Decode(marshal(t, sequenceModel(c.edit)), "", LoadOptions{})
			if err == nil {
				_, err = Import(m, ImportOptions{})
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v, want an error naming %s", err, c.want)
			}
		})
	}
}
