package onnx

import (
	"container/heap"
	"fmt"
	"strings"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/tensor"
)

func (d *decoder) decodeGraph(gp *onnxpb.GraphProto) (*Graph, error) {
	g := &Graph{Name: gp.GetName(), Initializers: map[string]*tensor.Tensor{}}
	for _, kv := range gp.GetMetadataProps() {
		if g.Metadata == nil {
			g.Metadata = map[string]string{}
		}
		g.Metadata[kv.GetKey()] = kv.GetValue()
	}
	for _, sp := range gp.GetSparseInitializer() {
		return nil, fmt.Errorf("%w: sparse initializer %q", ErrUnsupported, sp.GetValues().GetName())
	}
	for i, tp := range gp.GetInitializer() {
		name := tp.GetName()
		if name == "" {
			return nil, fmt.Errorf("%w: initializer #%d has no name", ErrMalformed, i)
		}
		if _, dup := g.Initializers[name]; dup {
			return nil, fmt.Errorf("%w: initializer %q is defined twice", ErrInvalidGraph, name)
		}
		t, err := d.decodeTensor(tp, fmt.Sprintf("initializer %q", name))
		if err != nil {
			return nil, err
		}
		// Decoded, the file's bytes are garbage: dropped now, a model's inline
		// weights are not held twice while the rest of it decodes (issue #26).
		g.InlineBytes += int64(len(tp.RawData))
		tp.RawData = nil
		g.Initializers[name] = t
		g.InitializerNames = append(g.InitializerNames, name)
	}
	var err error
	if g.Inputs, err = decodeValueInfos(gp.GetInput(), "graph input", true); err != nil {
		return nil, err
	}
	if g.Outputs, err = decodeValueInfos(gp.GetOutput(), "graph output", true); err != nil {
		return nil, err
	}
	if g.ValueInfo, err = decodeValueInfos(gp.GetValueInfo(), "value_info", false); err != nil {
		return nil, err
	}
	nodes, err := d.decodeNodes(gp.GetNode())
	if err != nil {
		return nil, err
	}
	defined := map[string]string{}
	for _, in := range g.Inputs {
		if _, dup := defined[in.Name]; dup {
			return nil, fmt.Errorf("%w: graph input %q is declared twice", ErrInvalidGraph, in.Name)
		}
		defined[in.Name] = fmt.Sprintf("graph input %q", in.Name)
	}
	for _, name := range g.InitializerNames {
		if _, ok := defined[name]; !ok { // an input with a default value is fine
			defined[name] = fmt.Sprintf("initializer %q", name)
		}
	}
	if g.Nodes, err = sortNodes(nodes, defined); err != nil {
		return nil, err
	}
	produced := map[string]bool{}
	for name := range defined {
		produced[name] = true
	}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			produced[o] = true
		}
	}
	for _, out := range g.Outputs {
		if !produced[out.Name] {
			return nil, fmt.Errorf("%w: graph output %q is not produced by any node, input or initializer",
				ErrInvalidGraph, out.Name)
		}
	}
	return g, nil
}

func (d *decoder) decodeFunction(fp *onnxpb.FunctionProto) (*Function, error) {
	if fp.GetName() == "" {
		return nil, fmt.Errorf("%w: function has no name", ErrMalformed)
	}
	opsets, err := decodeOpsets(fp.GetOpsetImport(), false)
	if err != nil {
		return nil, err
	}
	f := &Function{
		Name:     fp.GetName(),
		Domain:   normDomain(fp.GetDomain()),
		Overload: fp.GetOverload(),
		Inputs:   fp.GetInput(),
		Outputs:  fp.GetOutput(),
		Opsets:   opsets,
	}
	f.AttrNames = append(f.AttrNames, fp.GetAttribute()...)
	for _, a := range fp.GetAttributeProto() {
		f.AttrNames = append(f.AttrNames, a.GetName())
	}
	nodes, err := d.decodeNodes(fp.GetNode())
	if err != nil {
		return nil, err
	}
	defined := map[string]string{}
	for _, in := range f.Inputs {
		if _, dup := defined[in]; dup {
			return nil, fmt.Errorf("%w: function input %q is declared twice", ErrInvalidGraph, in)
		}
		defined[in] = fmt.Sprintf("function input %q", in)
	}
	if f.Nodes, err = sortNodes(nodes, defined); err != nil {
		return nil, err
	}
	return f, nil
}

func decodeValueInfos(vs []*onnxpb.ValueInfoProto, what string, strict bool) ([]ValueInfo, error) {
	out := make([]ValueInfo, 0, len(vs))
	for i, v := range vs {
		vi, err := decodeValueInfo(v, strict)
		if err != nil {
			if v.GetName() == "" {
				return nil, fmt.Errorf("%s #%d: %w", what, i, err)
			}
			return nil, fmt.Errorf("%s %q: %w", what, v.GetName(), err)
		}
		out = append(out, vi)
	}
	return out, nil
}

// decodeValueInfo decodes a value's name and type. With strict, the type must be
// a tensor of a supported dtype; otherwise an unusable type gives DType Invalid.
func decodeValueInfo(v *onnxpb.ValueInfoProto, strict bool) (ValueInfo, error) {
	vi := ValueInfo{Name: v.GetName()}
	for _, kv := range v.GetMetadataProps() {
		if vi.Metadata == nil {
			vi.Metadata = map[string]string{}
		}
		vi.Metadata[kv.GetKey()] = kv.GetValue()
	}
	if vi.Name == "" {
		return vi, fmt.Errorf("%w: value has no name", ErrMalformed)
	}
	tt := v.GetType().GetTensorType()
	if tt == nil {
		if strict {
			return vi, fmt.Errorf("%w: type is not a tensor type (sequence, map and optional "+
				"values are not supported)", ErrUnsupported)
		}
		return vi, nil
	}
	dt, err := decodeDType(tt.GetElemType())
	if err != nil {
		if strict {
			return vi, err
		}
		dt = tensor.Invalid
	}
	vi.DType = dt
	if tt.Shape == nil {
		return vi, nil
	}
	vi.HasShape = true
	vi.Dims = make([]Dim, 0, len(tt.Shape.GetDim()))
	for i, dp := range tt.Shape.GetDim() {
		switch x := dp.GetValue().(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			if x.DimValue < 0 {
				return vi, fmt.Errorf("%w: dim %d is negative (%d)", ErrMalformed, i, x.DimValue)
			}
			vi.Dims = append(vi.Dims, Dim{Value: x.DimValue, Known: true})
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			vi.Dims = append(vi.Dims, Dim{Param: x.DimParam})
		default:
			vi.Dims = append(vi.Dims, Dim{})
		}
	}
	return vi, nil
}

func (d *decoder) decodeNodes(nps []*onnxpb.NodeProto) ([]Node, error) {
	nodes := make([]Node, 0, len(nps))
	for _, np := range nps {
		n := Node{
			Name:    np.GetName(),
			OpType:  np.GetOpType(),
			Domain:  normDomain(np.GetDomain()),
			Inputs:  np.GetInput(),
			Outputs: np.GetOutput(),
			Attrs:   make(map[string]Attr, len(np.GetAttribute())),
		}
		for _, kv := range np.GetMetadataProps() {
			if n.Metadata == nil {
				n.Metadata = map[string]string{}
			}
			n.Metadata[kv.GetKey()] = kv.GetValue()
		}
		if n.OpType == "" {
			return nil, fmt.Errorf("%w: %v has no op_type", ErrMalformed, &n)
		}
		for _, ap := range np.GetAttribute() {
			name := ap.GetName()
			if name == "" {
				return nil, fmt.Errorf("%w: %v has an attribute without a name", ErrMalformed, &n)
			}
			if _, dup := n.Attrs[name]; dup {
				return nil, fmt.Errorf("%w: %v has attribute %q twice", ErrMalformed, &n, name)
			}
			a, err := d.decodeAttr(ap)
			if err != nil {
				return nil, fmt.Errorf("%v: attribute %q: %w", &n, name, err)
			}
			n.Attrs[name] = a
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// attrType returns the attribute's type, inferring it from the field that is set
// when the file leaves type out (IR version 1 files).
func attrType(ap *onnxpb.AttributeProto) onnxpb.AttributeProto_AttributeType {
	if ap.Type != nil {
		return ap.GetType()
	}
	switch {
	case ap.F != nil:
		return onnxpb.AttributeProto_FLOAT
	case ap.I != nil:
		return onnxpb.AttributeProto_INT
	case ap.S != nil:
		return onnxpb.AttributeProto_STRING
	case ap.T != nil:
		return onnxpb.AttributeProto_TENSOR
	case ap.G != nil:
		return onnxpb.AttributeProto_GRAPH
	case len(ap.Floats) > 0:
		return onnxpb.AttributeProto_FLOATS
	case len(ap.Ints) > 0:
		return onnxpb.AttributeProto_INTS
	case len(ap.Strings) > 0:
		return onnxpb.AttributeProto_STRINGS
	}
	return onnxpb.AttributeProto_UNDEFINED
}

func (d *decoder) decodeAttr(ap *onnxpb.AttributeProto) (Attr, error) {
	a := Attr{Ref: ap.GetRefAttrName()}
	switch typ := attrType(ap); typ {
	case onnxpb.AttributeProto_INT:
		a.Kind, a.Int = AttrInt, ap.GetI()
	case onnxpb.AttributeProto_FLOAT:
		a.Kind, a.Float = AttrFloat, float64(ap.GetF())
	case onnxpb.AttributeProto_STRING:
		a.Kind, a.String = AttrString, string(ap.GetS())
	case onnxpb.AttributeProto_INTS:
		a.Kind, a.Ints = AttrInts, append([]int64{}, ap.GetInts()...)
	case onnxpb.AttributeProto_FLOATS:
		a.Kind, a.Floats = AttrFloats, make([]float64, len(ap.GetFloats()))
		for i, f := range ap.GetFloats() {
			a.Floats[i] = float64(f)
		}
	case onnxpb.AttributeProto_STRINGS:
		a.Kind, a.Strings = AttrStrings, make([]string, len(ap.GetStrings()))
		for i, s := range ap.GetStrings() {
			a.Strings[i] = string(s)
		}
	case onnxpb.AttributeProto_TENSOR:
		a.Kind = AttrTensor
		if a.Ref != "" && ap.T == nil {
			break // the value comes from the caller
		}
		if ap.T == nil {
			return a, fmt.Errorf("%w: tensor attribute without a tensor", ErrMalformed)
		}
		t, err := d.decodeTensorData(ap.T)
		if err != nil {
			return a, err
		}
		a.Tensor = t
	case onnxpb.AttributeProto_UNDEFINED:
		return a, fmt.Errorf("%w: attribute has no type and no value", ErrMalformed)
	default:
		if _, known := onnxpb.AttributeProto_AttributeType_name[int32(typ)]; !known {
			return a, fmt.Errorf("%w: unknown attribute type %d", ErrMalformed, int32(typ))
		}
		a.Kind, a.ProtoType = AttrUnsupported, typ.String()
	}
	return a, nil
}

// sortNodes checks that every node input is defined (by defined, which maps
// names to a description of their definition, or by a node) and that each value
// is defined once, then sorts the nodes topologically, keeping the file order
// among nodes that are ready at the same time.
func sortNodes(nodes []Node, defined map[string]string) ([]Node, error) {
	producer := map[string]int{} // value name → index of the node producing it
	for i := range nodes {
		n := &nodes[i]
		for _, o := range n.Outputs {
			if o == "" {
				continue
			}
			if j, dup := producer[o]; dup {
				if j == i {
					return nil, fmt.Errorf("%w: %v lists output %q twice", ErrInvalidGraph, n, o)
				}
				return nil, fmt.Errorf("%w: value %q is produced twice: by %v and by %v",
					ErrInvalidGraph, o, &nodes[j], n)
			}
			if what, ok := defined[o]; ok {
				return nil, fmt.Errorf("%w: %v output %q shadows %s", ErrInvalidGraph, n, o, what)
			}
			producer[o] = i
		}
	}
	// Edges: node j → node i when i consumes an output of j.
	users := make([][]int, len(nodes))
	pending := make([]int, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		for _, in := range n.Inputs {
			if in == "" {
				continue
			}
			if j, ok := producer[in]; ok {
				users[j] = append(users[j], i)
				pending[i]++
				continue
			}
			if _, ok := defined[in]; !ok {
				return nil, fmt.Errorf("%w: %v: input %q is not a graph input, an initializer or "+
					"the output of any node", ErrInvalidGraph, n, in)
			}
		}
	}
	// Kahn's algorithm with a min-heap of indices keeps the order stable.
	ready := &intHeap{}
	for i := range nodes {
		if pending[i] == 0 {
			heap.Push(ready, i)
		}
	}
	sorted := make([]Node, 0, len(nodes))
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		sorted = append(sorted, nodes[i])
		for _, u := range users[i] {
			if pending[u]--; pending[u] == 0 {
				heap.Push(ready, u)
			}
		}
	}
	if len(sorted) < len(nodes) {
		return nil, cycleError(nodes, producer, pending)
	}
	return sorted, nil
}

// cycleError describes one cycle among the nodes Kahn's algorithm left behind.
func cycleError(nodes []Node, producer map[string]int, pending []int) error {
	start := -1
	for i, p := range pending {
		if p > 0 {
			start = i
			break
		}
	}
	// Walk backwards through unsorted producers: every left-over node has an
	// unsorted predecessor, so the walk revisits a node, which lies on a cycle.
	seenAt := map[int]int{}
	var path []int
	for i := start; ; {
		if k, ok := seenAt[i]; ok {
			path = path[k:]
			break
		}
		seenAt[i] = len(path)
		path = append(path, i)
		next := -1
		for _, in := range nodes[i].Inputs {
			if j, ok := producer[in]; ok && in != "" && pending[j] > 0 {
				next = j
				break
			}
		}
		if next < 0 {
			panic("lcc: BUG: onnx: cycle walk found a node without a pending producer")
		}
		i = next
	}
	// path follows edges backwards; print it forwards.
	parts := make([]string, 0, len(path)+1)
	for k := len(path) - 1; k >= 0; k-- {
		parts = append(parts, nodes[path[k]].String())
	}
	parts = append(parts, nodes[path[len(path)-1]].String())
	return fmt.Errorf("%w: the graph has a cycle through %v: %s", ErrInvalidGraph,
		&nodes[path[len(path)-1]], strings.Join(parts, " → "))
}

// intHeap is a min-heap of ints for container/heap.
type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
