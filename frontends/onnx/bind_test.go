package onnx

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/tensor"
)

// sliceModel is y = Slice(x, starts, ends) with starts and ends model inputs, and
// z = Trilu(x, k) with k declared a scalar.
func sliceModel() *onnxpb.ModelProto {
	i64 := onnxpb.TensorProto_INT64
	return &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("slice"),
			Node: []*onnxpb.NodeProto{
				node("s", "Slice", []string{"x", "starts", "ends"}, []string{"y"}),
				node("t", "Trilu", []string{"x", "k"}, []string{"z"}),
			},
			Input: []*onnxpb.ValueInfoProto{
				valueInfo("x", tensorType(onnxpb.TensorProto_FLOAT, 3, 4)),
				valueInfo("starts", tensorType(i64, 2)),
				valueInfo("ends", tensorType(i64, 2)),
				valueInfo("k", tensorType(i64)),
			},
			Output: []*onnxpb.ValueInfoProto{
				valueInfo("y", tensorType(onnxpb.TensorProto_FLOAT, 2, 2)),
				valueInfo("z", tensorType(onnxpb.TensorProto_FLOAT, 3, 4)),
			},
		},
	}
}

// TestBindInputValues: integer inputs that decide shapes are bound to given values
// (and leave the parameters); without values the error says how to bind them.
func TestBindInputValues(t *testing.T) {
	m, err := Decode(marshal(t, sliceModel()), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Import(m, ImportOptions{})
	if err == nil || !strings.Contains(err.Error(), `input 1 ("starts") is computed at run time`) ||
		!strings.Contains(err.Error(), "give it a value") {
		t.Fatalf("without values: %v", err)
	}
	ints := func(shape []int64, v ...int64) *tensor.Tensor {
		x := tensor.New(tensor.I64, shape...)
		copy(x.I, v)
		return x
	}
	vals := map[string]*tensor.Tensor{
		"starts": ints([]int64{2}, 1, 1), "ends": ints([]int64{2}, 3, 3),
		// k given with one element for the declared scalar, as ONNX's own tests do.
		"k": ints([]int64{1}, 1),
	}
	f, err := Import(m, ImportOptions{InputValues: vals, InputShapes: map[string][]int64{"k": {1}}})
	if err != nil {
		t.Fatal(err)
	}
	var params []string
	for _, p := range f.Params {
		params = append(params, p.Name)
	}
	if got := strings.Join(params, " "); got != "x" {
		t.Errorf("params %q, want only x", got)
	}
	notes := strings.Join(f.Notes, "\n")
	for _, want := range []string{`input "starts" is bound to its given value [1 1]`, `input "k" is bound to its given value [1]`} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
	x := tensor.New(tensor.F32, 3, 4)
	for i := range x.F {
		x.F[i] = float64(i + 1)
	}
	outs, err := interp.Run(f, map[string]*tensor.Tensor{"x": x}, interp.Options{Precision: tensor.F32})
	if err != nil {
		t.Fatal(err)
	}
	if y := outs["y"]; tensor.ShapeString(y.Shape) != "[2,2]" || y.F[0] != 6 || y.F[3] != 11 {
		t.Errorf("y = %v %v, want [2,2] [6 7 10 11]", y.Shape, y.F)
	}
	// Trilu (upper by default) with k=1 keeps x[i][j] for j >= i+1.
	want := []float64{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}
	for i, w := range want {
		if outs["z"].F[i] != w {
			t.Fatalf("z = %v, want %v", outs["z"].F, want)
		}
	}
}
