package onnx

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// LCCDomain is the ONNX domain of lcc's own ops in exported graphs.
const LCCDomain = "ai.lcc"

var exportDTypes = map[tensor.DType]int32{tensor.F32: 1, tensor.U8: 2, tensor.I8: 3, tensor.I32: 6,
	tensor.I64: 7, tensor.Bool: 9, tensor.F16: 10, tensor.F64: 11, tensor.BF16: 16}

// Export writes f as an ONNX model (opset 18 plus the ai.lcc domain). Weights with
// data become initializers; parameters keep their dim labels as dim_param.
func Export(f *ir.Func) ([]byte, error) {
	names := map[*ir.Value]string{}
	g := &onnxpb.GraphProto{Name: proto.String(f.Name)}
	for _, p := range f.Params {
		names[p.Value] = p.Name
		if p.Data != nil {
			t, err := exportTensor(p.Name, p.Data)
			if err != nil {
				return nil, err
			}
			g.Initializer = append(g.Initializer, t)
			continue
		}
		g.Input = append(g.Input, exportValueInfo(p.Name, p.Value.Type))
	}
	for i, n := range f.Body {
		for j, r := range n.Results {
			names[r] = "v" + strconv.Itoa(i) + "_" + strconv.Itoa(j)
		}
		np := &onnxpb.NodeProto{Name: proto.String(n.Name)}
		if n.Name == "" {
			np.Name = proto.String(n.Op.String() + "_" + strconv.Itoa(i))
		}
		for _, a := range n.Args {
			np.Input = append(np.Input, names[a])
		}
		for _, r := range n.Results {
			np.Output = append(np.Output, names[r])
		}
		opType := n.Op.Info().ONNX // the ONNX op equal to the IR op (ir/onnx_names.go)
		std := opType != ""
		if n.Op == ir.OpMatMul && !n.AttrBool("transpose_a") && !n.AttrBool("transpose_b") {
			opType, std = "MatMul", true
		}
		if n.Op == ir.OpCast {
			np.OpType = proto.String("Cast")
			np.Attribute = append(np.Attribute, &onnxpb.AttributeProto{Name: proto.String("to"),
				Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(exportDTypes[n.AttrDType("to")]))})
			g.Node = append(g.Node, np)
			continue
		}
		if std {
			np.OpType = proto.String(opType)
		} else {
			np.OpType = proto.String(n.Op.String())
			np.Domain = proto.String(LCCDomain)
		}
		for _, a := range n.Attrs {
			if std && n.Op == ir.OpMatMul {
				continue
			}
			ap, err := exportAttr(a)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n.Where(), err)
			}
			np.Attribute = append(np.Attribute, ap)
		}
		g.Node = append(g.Node, np)
		for _, r := range n.Results {
			g.ValueInfo = append(g.ValueInfo, exportValueInfo(names[r], r.Type))
		}
	}
	for _, o := range f.Outputs {
		// An output reads a value under its own name through Identity.
		g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String("Identity"),
			Name: proto.String("output_" + o.Name), Input: []string{names[o.Value]}, Output: []string{o.Name}})
		g.Output = append(g.Output, exportValueInfo(o.Name, o.Value.Type))
	}
	m := &onnxpb.ModelProto{
		IrVersion:    proto.Int64(9),
		ProducerName: proto.String("lcc"),
		Graph:        g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{
			{Domain: proto.String(""), Version: proto.Int64(18)},
			{Domain: proto.String(LCCDomain), Version: proto.Int64(1)},
		},
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

func exportValueInfo(name string, t ir.Type) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for i, d := range t.Shape {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		if t.Labels != nil && t.Labels[i] != "" {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: t.Labels[i]}
		} else {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{
		Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
			ElemType: proto.Int32(exportDTypes[t.DType]), Shape: shape}}}}
}

func exportTensor(name string, t *tensor.Tensor) (*onnxpb.TensorProto, error) {
	dt, ok := exportDTypes[t.DType]
	if !ok {
		return nil, fmt.Errorf("tensor %s: dtype %v has no ONNX type", name, t.DType)
	}
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: append([]int64{}, t.Shape...),
		DataType: proto.Int32(dt), RawData: t.Encode()}, nil
}

func exportAttr(a ir.Attr) (*onnxpb.AttributeProto, error) {
	ap := &onnxpb.AttributeProto{Name: proto.String(a.Name)}
	switch v := a.Value.(type) {
	case bool:
		ap.Type, ap.I = onnxpb.AttributeProto_INT.Enum(), proto.Int64(1)
	case int64:
		ap.Type, ap.I = onnxpb.AttributeProto_INT.Enum(), proto.Int64(v)
	case []int64:
		ap.Type, ap.Ints = onnxpb.AttributeProto_INTS.Enum(), v
	case float64:
		ap.Type, ap.F = onnxpb.AttributeProto_FLOAT.Enum(), proto.Float32(float32(v))
		if math.IsInf(v, 0) || float64(float32(v)) != v {
			// Keep the exact value readable too: ONNX floats are float32.
			ap.DocString = proto.String(strconv.FormatFloat(v, 'g', -1, 64))
		}
	case []float64:
		fs := make([]float32, len(v))
		for i, x := range v {
			fs[i] = float32(x)
		}
		ap.Type, ap.Floats = onnxpb.AttributeProto_FLOATS.Enum(), fs
	case string:
		ap.Type, ap.S = onnxpb.AttributeProto_STRING.Enum(), []byte(v)
	case tensor.DType:
		ap.Type, ap.I = onnxpb.AttributeProto_INT.Enum(), proto.Int64(int64(exportDTypes[v]))
	case *tensor.Tensor:
		t, err := exportTensor(a.Name, v)
		if err != nil {
			return nil, err
		}
		ap.Type, ap.T = onnxpb.AttributeProto_TENSOR.Enum(), t
	default:
		return nil, fmt.Errorf("attribute %s: cannot export %T", a.Name, a.Value)
	}
	return ap, nil
}

// sortedDomains is used by tests to list the domains an export uses.
func sortedDomains(m *Model) []string {
	var ds []string
	for d := range m.Opsets {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}
