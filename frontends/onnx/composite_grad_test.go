package onnx

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/passes/autodiff/gradcheck"
	"github.com/lcc-dev/lcc/tensor"
)

// TestCompositeLoweringGrads checks by finite differences the gradients through the
// ops lowered as compositions of IR ops (ReduceProd, ReduceLogSumExp, ReduceL1,
// ReduceL2, ReduceSumSquare, LayerNormalization's Mean and InvStdDev, Pad,
// RotaryEmbedding, the activations (Elu, Selu, LeakyRelu, HardSigmoid, HardSwish,
// Softplus, Softsign, Sinh, Cosh, Tan, PRelu), Clip,
// SoftmaxCrossEntropyLoss with class weights, an ignored label and log_prob): x is
// an f64 weight (as are the class weights), every output gets a
// random seed.
func TestCompositeLoweringGrads(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	f64 := func(name string, dims ...int64) *onnxpb.TensorProto {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		raw := make([]byte, 8*n)
		for i := int64(0); i < n; i++ {
			v := r.NormFloat64()
			if math.Abs(v) < 0.2 { // keep |x| away from 0, where Abs and prod kink
				v += math.Copysign(0.3, v)
			}
			binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(v))
		}
		return rawTensor(name, onnxpb.TensorProto_DOUBLE, dims, raw)
	}
	i64 := func(name string, v ...int64) *onnxpb.TensorProto {
		raw := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
		}
		return rawTensor(name, onnxpb.TensorProto_INT64, []int64{int64(len(v))}, raw)
	}
	// labels [2, 4] over 3 classes (x is [2, 3, 4]), one of them the ignored -1.
	labels := func() *onnxpb.TensorProto {
		t := i64("labels", 0, 2, 1, -1, 2, 2, 0, 1)
		t.Dims = []int64{2, 4}
		return t
	}
	keep0 := &onnxpb.AttributeProto{Name: proto.String("keepdims"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)}
	for _, tc := range []struct {
		name  string
		nodes []*onnxpb.NodeProto
		inits []*onnxpb.TensorProto
		outs  []string
	}{
		{"ReduceProd", []*onnxpb.NodeProto{node("n", "ReduceProd", []string{"x", "axes"}, []string{"y"})},
			[]*onnxpb.TensorProto{i64("axes", 1)}, []string{"y"}},
		{"ReduceLogSumExp", []*onnxpb.NodeProto{node("n", "ReduceLogSumExp", []string{"x", "axes"}, []string{"y"})},
			[]*onnxpb.TensorProto{i64("axes", -1)}, []string{"y"}},
		{"ReduceL1", []*onnxpb.NodeProto{node("n", "ReduceL1", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"ReduceL2", []*onnxpb.NodeProto{node("n", "ReduceL2", []string{"x", "axes"}, []string{"y"})},
			[]*onnxpb.TensorProto{i64("axes", 0, 2)}, []string{"y"}},
		{"ReduceSumSquare", []*onnxpb.NodeProto{node("n", "ReduceSumSquare", []string{"x", "axes"}, []string{"y"})},
			[]*onnxpb.TensorProto{i64("axes", 1)}, []string{"y"}},
		{"LayerNormalization", []*onnxpb.NodeProto{node("n", "LayerNormalization", []string{"x", "g"}, []string{"y", "mean", "inv"})},
			[]*onnxpb.TensorProto{f64("g", 4)}, []string{"y", "mean", "inv"}},
		{"Pad", []*onnxpb.NodeProto{node("n", "Pad", []string{"x", "pads"}, []string{"y"})},
			[]*onnxpb.TensorProto{i64("pads", 1, 0, -1, 0, 2, 1)}, []string{"y"}},
		{"SoftmaxCrossEntropyLoss", []*onnxpb.NodeProto{node("n", "SoftmaxCrossEntropyLoss", []string{"x", "labels", "w"},
			[]string{"z", "log_prob"})}, []*onnxpb.TensorProto{labels(), f64("w", 3)}, []string{"z", "log_prob"}},
		{"RotaryEmbedding", []*onnxpb.NodeProto{node("n", "RotaryEmbedding", []string{"x", "cos", "sin"}, []string{"y"})},
			[]*onnxpb.TensorProto{f64("cos", 2, 3, 1), f64("sin", 2, 3, 1)}, []string{"y"}},
		{"Elu", []*onnxpb.NodeProto{node("n", "Elu", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"Selu", []*onnxpb.NodeProto{node("n", "Selu", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"LeakyRelu", []*onnxpb.NodeProto{node("n", "LeakyRelu", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"HardSigmoid", []*onnxpb.NodeProto{node("n", "HardSigmoid", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"HardSwish", []*onnxpb.NodeProto{node("n", "HardSwish", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"Softplus", []*onnxpb.NodeProto{node("n", "Softplus", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"Softsign", []*onnxpb.NodeProto{node("n", "Softsign", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"Sinh", []*onnxpb.NodeProto{node("n", "Sinh", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"Cosh", []*onnxpb.NodeProto{node("n", "Cosh", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"Tan", []*onnxpb.NodeProto{node("n", "Tan", []string{"x"}, []string{"y"})}, nil, []string{"y"}},
		{"PRelu", []*onnxpb.NodeProto{node("n", "PRelu", []string{"x", "slope"}, []string{"y"})},
			[]*onnxpb.TensorProto{f64("slope", 4)}, []string{"y"}},
		{"Clip", []*onnxpb.NodeProto{node("n", "Clip", []string{"x", "lo", "hi"}, []string{"y"})},
			[]*onnxpb.TensorProto{f64("lo"), f64("hi")}, []string{"y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch tc.name {
			case "ReduceProd":
				tc.nodes[0].Attribute = []*onnxpb.AttributeProto{keep0}
			case "RotaryEmbedding": // x is [2, 3, 4]: one head of 4, its first 2 channels rotated, interleaved
				tc.nodes[0].Attribute = []*onnxpb.AttributeProto{
					{Name: proto.String("num_heads"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)},
					{Name: proto.String("rotary_embedding_dim"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(2)},
					{Name: proto.String("interleaved"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)}}
			case "SoftmaxCrossEntropyLoss":
				tc.nodes[0].Attribute = []*onnxpb.AttributeProto{{Name: proto.String("ignore_index"),
					Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(-1)}}
			}
			var outs []*onnxpb.ValueInfoProto
			for _, o := range tc.outs {
				outs = append(outs, valueInfo(o, &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
					TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_DOUBLE))}}}))
			}
			m := &onnxpb.ModelProto{
				IrVersion:   proto.Int64(10),
				OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}},
				Graph: &onnxpb.GraphProto{Name: proto.String("g"), Node: tc.nodes,
					Initializer: append([]*onnxpb.TensorProto{f64("x", 2, 3, 4)}, tc.inits...), Output: outs},
			}
			dm, err := Decode(marshal(t, m), "", LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := Import(dm, ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			seeds := map[string]*tensor.Tensor{}
			for _, o := range tc.outs {
				s := tensor.New(tensor.F64, f.Output(o).Type.Shape...)
				for i := range s.F {
					s.F[i] = r.NormFloat64()
				}
				seeds[o] = s
			}
			res, err := gradcheck.Check(f, map[string]*tensor.Tensor{}, gradcheck.Objective{Seeds: seeds}, 1e-6)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) == 0 {
				t.Fatal("no weight checked")
			}
			for _, p := range res {
				if p.RelErr > 1e-6 || math.IsNaN(p.RelErr) {
					t.Errorf("d/d %s: relative error %.3g", p.Param, p.RelErr)
				}
			}
		})
	}
}
