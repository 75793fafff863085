// Package onnxgen builds ONNX models of any size in Go, for the tests that hold
// lcc's stages to linear time in the size of a graph (issue #23: a 16,000-Add model
// took a minute in one quadratic pass). Generating the models keeps megabyte files
// out of the repository. Only tests import it.
package onnxgen

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
)

// Graph is an ONNX graph under construction, opset 18, every value f32 but the
// int64 initializers.
type Graph struct {
	g     *onnxpb.GraphProto
	nodes int
}

// New starts a graph called name.
func New(name string) *Graph { return &Graph{g: &onnxpb.GraphProto{Name: proto.String(name)}} }

func f32Type(dims []int64) *onnxpb.TypeProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{
			Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
		ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: shape}}}
}

// Input declares an f32 graph input.
func (g *Graph) Input(name string, dims ...int64) {
	g.g.Input = append(g.g.Input, &onnxpb.ValueInfoProto{Name: proto.String(name), Type: f32Type(dims)})
}

// Output declares an f32 graph output.
func (g *Graph) Output(name string, dims ...int64) {
	g.g.Output = append(g.g.Output, &onnxpb.ValueInfoProto{Name: proto.String(name), Type: f32Type(dims)})
}

// Weight adds an f32 initializer of shape dims whose elements cycle through vals.
func (g *Graph) Weight(name string, dims []int64, vals ...float32) {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	raw := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(vals[int(i)%len(vals)]))
	}
	g.g.Initializer = append(g.g.Initializer, &onnxpb.TensorProto{Name: proto.String(name),
		DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: dims, RawData: raw})
}

// Ints adds a one-dimensional int64 initializer (axes, shapes).
func (g *Graph) Ints(name string, vals ...int64) {
	g.g.Initializer = append(g.g.Initializer, &onnxpb.TensorProto{Name: proto.String(name),
		DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Dims: []int64{int64(len(vals))},
		Int64Data: vals})
}

// Attr is an integer attribute of a node.
type Attr struct {
	Name  string
	Value int64
}

// Node appends a node of op reading ins and returns the name of its one output.
func (g *Graph) Node(op string, attrs []Attr, ins ...string) string {
	g.nodes++
	out := fmt.Sprintf("v%d", g.nodes)
	n := &onnxpb.NodeProto{Name: proto.String(fmt.Sprintf("n%d", g.nodes)), OpType: proto.String(op),
		Input: ins, Output: []string{out}}
	for _, a := range attrs {
		n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String(a.Name),
			Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(a.Value)})
	}
	g.g.Node = append(g.g.Node, n)
	return out
}

// Rename makes the last node's output value name instead, for graph outputs.
func (g *Graph) Rename(name string) {
	n := g.g.Node[len(g.g.Node)-1]
	n.Output[0] = name
}

// Nodes is the number of nodes so far.
func (g *Graph) Nodes() int { return len(g.g.Node) }

// Marshal encodes the model.
func (g *Graph) Marshal() ([]byte, error) {
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}},
		Graph:       g.g}
	return proto.Marshal(m)
}

// AddChain is the model: y = x + x + … with adds Adds in a chain, x
// f32[2,8], an inference graph.
func AddChain(adds int) *Graph {
	g := New("add_chain")
	g.Input("x", 2, 8)
	h := "x"
	for range adds {
		h = g.Node("Add", nil, h, "x")
	}
	g.Rename("y")
	g.Output("y", 2, 8)
	return g
}

// Blocks is a training graph of blocks residual blocks of 10 nodes each, as
// exporters write a pre-norm MLP: the decomposed RMSNorm (pow, mean, add, sqrt,
// div), its scale, a matmul, tanh, a scale by a shared constant and the residual
// add; then loss = mean(h²). x is f32[4,dim]; every block has its own [dim,dim]
// weight and γ, and the constants (2, eps, ½) are shared by every block, so some
// values have as many readers as there are blocks.
func Blocks(blocks int, dim int64) *Graph {
	g := New("blocks")
	g.Input("x", 4, dim)
	g.Weight("two", nil, 2)
	g.Weight("eps", nil, 1e-6)
	g.Weight("half", nil, 0.5)
	g.Ints("last", -1)
	h := "x"
	for i := range blocks {
		w, gamma := fmt.Sprintf("w%d", i), fmt.Sprintf("gamma%d", i)
		g.Weight(w, []int64{dim, dim}, 0.01, -0.02, 0.03)
		g.Weight(gamma, []int64{dim}, 1)
		sq := g.Node("Pow", nil, h, "two")
		ms := g.Node("ReduceMean", []Attr{{"keepdims", 1}}, sq, "last")
		rms := g.Node("Sqrt", nil, g.Node("Add", nil, ms, "eps"))
		n := g.Node("Mul", nil, g.Node("Div", nil, h, rms), gamma)
		t := g.Node("Tanh", nil, g.Node("MatMul", nil, n, w))
		h = g.Node("Add", nil, h, g.Node("Mul", nil, t, "half"))
	}
	g.Node("ReduceMean", []Attr{{"keepdims", 0}}, g.Node("Mul", nil, h, h))
	g.Rename("loss")
	g.Output("loss")
	return g
}

// dimsType is the tensor type of elem with dims, a dim named in params (by
// index) symbolic (dim_param) instead of the number.
func dimsType(elem onnxpb.TensorProto_DataType, dims []int64, params map[int]string) *onnxpb.TypeProto {
	shape := &onnxpb.TensorShapeProto{}
	for i, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
		if p, ok := params[i]; ok {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: p}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
		ElemType: proto.Int32(int32(elem)), Shape: shape}}}
}

// LM is a language model of vocab tokens and width dim with layers residual
// tanh layers: input_ids i64[batch,seq], an embedding gather, h += tanh(h·Wᵢ)
// per layer, logits = h·head f32[batch,seq,vocab]. Its 2·vocab·dim + layers·dim²
// parameters make a model of any size to load and train; tests of host memory
// write it with WriteExternal.
func LM(vocab, dim, layers int64) *Graph {
	g := New("lm")
	bs := map[int]string{0: "batch", 1: "seq"}
	g.g.Input = append(g.g.Input, &onnxpb.ValueInfoProto{Name: proto.String("input_ids"),
		Type: dimsType(onnxpb.TensorProto_INT64, []int64{1, 1}, bs)})
	g.Weight("emb", []int64{vocab, dim}, 0.01, -0.02, 0.03)
	h := g.Node("Gather", nil, "emb", "input_ids")
	for i := range layers {
		w := fmt.Sprintf("w%d", i)
		g.Weight(w, []int64{dim, dim}, 0.01, -0.02, 0.03)
		h = g.Node("Add", nil, h, g.Node("Tanh", nil, g.Node("MatMul", nil, h, w)))
	}
	g.Weight("head", []int64{dim, vocab}, 0.01, -0.02, 0.03)
	g.Node("MatMul", nil, h, "head")
	g.Rename("logits")
	g.g.Output = append(g.g.Output, &onnxpb.ValueInfoProto{Name: proto.String("logits"),
		Type: dimsType(onnxpb.TensorProto_FLOAT, []int64{1, 1, vocab}, bs)})
	return g
}

// WriteExternal writes the model as dir/name with every initializer's bytes
// in external data, dir/name.data, as exporters write models past protobuf's
// 2 GiB; it returns the model's path. The initializers' bytes are moved out of
// g, so a graph is written once.
func (g *Graph) WriteExternal(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	data, err := os.Create(path + ".data")
	if err != nil {
		return "", err
	}
	var off int64
	for _, t := range g.g.Initializer {
		if t.RawData == nil {
			continue
		}
		if _, err := data.Write(t.RawData); err != nil {
			data.Close()
			return "", err
		}
		t.ExternalData = []*onnxpb.StringStringEntryProto{
			{Key: proto.String("location"), Value: proto.String(name + ".data")},
			{Key: proto.String("offset"), Value: proto.String(fmt.Sprint(off))},
			{Key: proto.String("length"), Value: proto.String(fmt.Sprint(len(t.RawData)))}}
		t.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
		off += int64(len(t.RawData))
		t.RawData = nil
	}
	if err := data.Close(); err != nil {
		return "", err
	}
	model, err := g.Marshal()
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, model, 0o644)
}
