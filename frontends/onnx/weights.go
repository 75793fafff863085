package onnx

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/internal/userfile"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// WithWeights returns the ONNX model at path with its parameters replaced by
// weights, keyed by the names Import gives the model's weights (as an lcc
// checkpoint holds them), and the number of initializers written.
//
// The file keeps its graph; only initializers change. Where the importer
// undid the exporter's optimizations (see params.go), the file is changed to
// match: an initializer holding a folded Wᵀ gets the trained W transposed; a
// parameter the exporter merged into another's initializer gets an initializer
// of its own, and the nodes whose FX node read it read that; a zero bias the
// exporter dropped from a Gemm comes back as the Gemm's third input; a node the
// exporter's CSE merged gets its copies back (cse_split.go). Importing
// the result gives back weights equal to the trained ones. Initializers kept in
// external data are written inline.
func WithWeights(path string, weights map[string]*tensor.Tensor) ([]byte, int, error) {
	raw, err := userfile.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("onnx: %w", err)
	}
	m, err := Load(path, LoadOptions{})
	if err != nil {
		return nil, 0, err
	}
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(raw, &mp); err != nil {
		return nil, 0, fmt.Errorf("onnx: %s: %w", path, err)
	}
	g := mp.GetGraph()
	if len(g.Node) != len(m.Graph.Nodes) {
		return nil, 0, fmt.Errorf("onnx: %s: lcc: BUG: %d nodes decoded, %d in the file", path,
			len(m.Graph.Nodes), len(g.Node))
	}
	l := &lowerer{m: m, opts: ImportOptions{FoldLimit: DefaultFoldLimit}, b: ir.NewBuilder("weights"),
		env: map[string]*val{}}
	// value returns the trained value of the weight lcc named name, laid out as the
	// file holds it (transposed back for a folded Wᵀ).
	value := func(name string, transposed bool, shape []int64) (*tensor.Tensor, error) {
		t, ok := weights[name]
		if !ok {
			return nil, fmt.Errorf("onnx: %s: no trained weight %q", path, name)
		}
		if transposed {
			t = transpose2D(t)
		}
		if shape != nil && !sameShape(t.Shape, shape) {
			return nil, fmt.Errorf("onnx: %s: trained weight %q is %v, the file holds %v", path, name,
				t.Shape, shape)
		}
		return t, nil
	}
	newInit := map[string]*tensor.Tensor{} // initializer name -> value
	written := 0
	if l.prov = readProvenance(m); l.prov != nil {
		// Nodes the exporter's CSE merged come back as Import gives them back, so
		// that each copy's parameters get initializers of their own.
		if split, cse := splitCSE(m, l.prov); cse.origin != nil {
			g.Node = splitProto(g.Node, split, cse)
			m, l.m = split, split
		}
		l.planParams(l.prov)
		plan := l.plan
		for name, p := range plan.initParam {
			ref := plan.held[p]
			if ref.w == nil || ref.w.Param.Frozen {
				continue
			}
			t, err := value(ref.w.Param.Name, ref.transposed, m.Graph.Initializers[name].Shape)
			if err != nil {
				return nil, 0, err
			}
			newInit[name] = t
		}
		// Reads of a merged initializer that stand for another parameter.
		for i := range m.Graph.Nodes {
			n := &m.Graph.Nodes[i]
			for j, in := range g.Node[i].Input {
				p, ok := plan.uses[n][in]
				if !ok {
					continue
				}
				ref := plan.held[p]
				if _, done := newInit[p]; !done {
					t, err := value(ref.w.Param.Name, ref.transposed, nil)
					if err != nil {
						return nil, 0, err
					}
					if _, clash := m.Graph.Initializers[p]; clash {
						return nil, 0, fmt.Errorf("onnx: %s: parameter %q is also an initializer's name", path, p)
					}
					newInit[p] = t
					g.Initializer = append(g.Initializer, &onnxpb.TensorProto{Name: proto.String(p)})
				}
				g.Node[i].Input[j] = p
			}
			if bias, ok := plan.restored[n]; ok {
				if _, done := newInit[bias]; !done {
					t, err := value(plan.held[bias].w.Param.Name, false, nil)
					if err != nil {
						return nil, 0, err
					}
					newInit[bias] = t
					g.Initializer = append(g.Initializer, &onnxpb.TensorProto{Name: proto.String(bias)})
				}
				g.Node[i].Input = append(g.Node[i].Input, bias)
			}
		}
	} else {
		// Without provenance every float initializer of rank >= 1 is a weight of
		// the same name, laid out as the file holds it.
		for _, name := range m.Graph.InitializerNames {
			if t, ok := weights[name]; ok {
				if !sameShape(t.Shape, m.Graph.Initializers[name].Shape) {
					return nil, 0, fmt.Errorf("onnx: %s: trained weight %q is %v, the file holds %v", path,
						name, t.Shape, m.Graph.Initializers[name].Shape)
				}
				newInit[name] = t
			}
		}
	}
	for _, tp := range g.Initializer {
		name := tp.GetName()
		t, ok := newInit[name]
		if !ok && tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
			t, ok = m.Graph.Initializers[name], true // inline what the new file cannot point to
		}
		if !ok {
			continue
		}
		if want := m.Graph.Initializers[name]; want != nil && want.DType != t.DType {
			t = t.Convert(want.DType)
		}
		enc, err := exportTensor(name, t)
		if err != nil {
			return nil, 0, err
		}
		*tp = onnxpb.TensorProto{Name: enc.Name, Dims: enc.Dims, DataType: enc.DataType, RawData: enc.RawData}
		if _, trained := newInit[name]; trained {
			written++
		}
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(&mp)
	if err != nil {
		return nil, 0, fmt.Errorf("onnx: %s: %w", path, err)
	}
	return out, written, nil
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
