package onnx

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// ErrUnboundDim is wrapped by Import's error when a symbolic input dim has no value.
var ErrUnboundDim = errors.New("unbound dimension")

// DefaultFoldLimit caps the elements of a tensor that Import folds to a constant.
// Shape arithmetic is always tiny; a folded [seq, seq] mask or [seq, d] RoPE table
// at a million tokens is not, and stays a computation.
const DefaultFoldLimit = 1 << 16

// ImportOptions controls the lowering to IR.
type ImportOptions struct {
	// Consume lets Import take the data of each initializer it transposes (an
	// exporter's folded Linear weight, Wᵀ: lcc keeps W): the weight is
	// transposed in the initializer's own storage, and the Model keeps only its
	// dtype and shape. The load then holds one copy of the weights, not both
	// layouts at once (issue #26: the 3B Llama's load peaked at 45 GiB for 24
	// GiB of weights). Set it when nothing reads the Model's initializer data
	// after Import.
	Consume bool
	// Dims binds symbolic dims (ONNX dim_param) by name, e.g. {"batch": 1, "seq": 4096}.
	Dims map[string]int64
	// InputShapes binds whole input shapes by input name; it overrides Dims and the
	// file's shape for that input (lcc check takes them from the reference tensors).
	InputShapes map[string][]int64
	// FoldLimit caps constant folding (elements); 0 means DefaultFoldLimit.
	FoldLimit int64
	// LabelInputs names the integer inputs that are training targets; nil means
	// any integer input called "labels", "label" or "targets".
	LabelInputs []string
	// InputValues holds values the caller knows for inputs (lcc check and run take
	// them from the tensors they are given). An integer or bool input that a
	// lowering needs as a constant (Slice's starts, a Reduce's axes, Trilu's k,
	// Reshape's shape, Dropout's training_mode, ...) is bound to its value, as TensorRT treats shape tensors, and the function
	// is specialised to it; every other input stays a parameter fed at run time.
	InputValues map[string]*tensor.Tensor
}

// Import lowers a decoded model to an IR function with concrete shapes. Symbolic
// dims are bound from opts; values computed from shapes alone (Shape, Range,
// ConstantOfShape, mask arithmetic) fold to constants up to opts.FoldLimit.
// Unsupported ops are reported all at once, each with domain, opset and node.
func Import(m *Model, opts ImportOptions) (*ir.Func, error) {
	if opts.FoldLimit == 0 {
		opts.FoldLimit = DefaultFoldLimit
	}
	if err := checkOps(m); err != nil {
		return nil, err
	}
	name := m.Graph.Name
	if name == "" {
		name = "main"
	}
	var cse cseSplit
	if prov := readProvenance(m); prov != nil {
		m, cse = splitCSE(m, prov)
	}
	l := &lowerer{m: m, opts: opts, b: ir.NewBuilder(name), env: make(map[string]*val), cse: cse}
	if err := l.params(); err != nil {
		return nil, err
	}
	for i := range m.Graph.Nodes {
		if err := l.node(&m.Graph.Nodes[i]); err != nil {
			if l.clipped != "" {
				err = fmt.Errorf("%w; earlier, %s: a sequence longer than the model's position "+
					"table?", err, l.clipped)
			}
			return nil, fmt.Errorf("%s: %s: %w", m.Source, m.Graph.Nodes[i].String(), err)
		}
	}
	for _, o := range m.Graph.Outputs {
		v, err := l.value(l.b, o.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: output %q: %w", m.Source, o.Name, err)
		}
		l.b.Output(o.Name, v)
	}
	f, err := l.b.Build()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Source, err)
	}
	if l.plan != nil {
		f.Notes, f.Untrained = l.paramNotes(l.prov)
		f.Remarks = append(l.plan.remarks(), l.cse.remarks...)
	} else {
		f.Notes = foldedParameters(m, f)
	}
	l.dropBoundInputs(f)
	f.InlineBytes = m.Graph.InlineBytes
	return f, nil
}

// boundInput returns the value of input name when the lowering may bind it as a
// constant (see ImportOptions.InputValues), converted to the input's declared type;
// nil otherwise.
func (l *lowerer) boundInput(name string, e *val) *tensor.Tensor {
	t, ok := l.opts.InputValues[name]
	intOrBool := func(dt tensor.DType) bool { return dt.IsInt() || dt == tensor.Bool }
	if !ok || e.v == nil || e.v.Param == nil || e.v.Param.Role != ir.RoleInput || !intOrBool(e.v.Type.DType) ||
		!intOrBool(t.DType) || int64(t.Numel()) != e.v.Type.Numel() {
		return nil
	}
	c := tensor.New(e.v.Type.DType, e.v.Type.Shape...)
	for i := range c.I {
		c.I[i] = t.Int(i)
	}
	c.RoundTo(c.DType)
	if l.bound == nil {
		l.bound = map[string]*tensor.Tensor{}
	}
	l.bound[name] = c
	return c
}

// dropBoundInputs removes the inputs bound to their values that nothing reads at
// run time any more, and says which inputs were bound.
func (l *lowerer) dropBoundInputs(f *ir.Func) {
	if len(l.bound) == 0 {
		return
	}
	uses := f.Uses()
	kept := f.Params[:0]
	for _, p := range f.Params {
		if c, ok := l.bound[p.Name]; ok {
			f.Notes = append(f.Notes, fmt.Sprintf("input %q is bound to its given value %s: it decides shapes, "+
				"so the function is specialised to it", p.Name, constString(c)))
			if len(uses[p.Value]) == 0 && !f.IsOutput(p.Value) {
				continue
			}
		}
		kept = append(kept, p)
	}
	f.Params = kept
}

// constString prints a small integer tensor's values ([1 2 3]), or its type.
func constString(t *tensor.Tensor) string {
	if t.Numel() > 16 {
		return fmt.Sprintf("%v%s", t.DType, tensor.ShapeString(t.Shape))
	}
	return fmt.Sprint(t.Ints())
}

// foldedParameters names the framework parameters that the exporter's FX nodes
// read ("%p_..." placeholders; buffers are "%b_...") but that no weight holds under
// their name: onnxscript's optimizer folded them into constants (an all-zero bias
// vanishes from a Gemm) or merged them with an equal initializer (all LayerNorm
// scales become one). Training the exported graph cannot update them as PyTorch
// would: folded ones stay frozen, merged ones are tied.
func foldedParameters(m *Model, f *ir.Func) []string {
	var names []string
	for _, p := range f.Params {
		if p.Role == ir.RoleWeight {
			names = append(names, alnumLower(p.Name), alnumLower(p.Origin))
		}
	}
	held := func(placeholder string) bool {
		want := alnumLower(strings.TrimPrefix(placeholder, "p_"))
		for _, n := range names {
			if n != "" && (strings.HasSuffix(want, n) || strings.HasSuffix(n, want)) {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	var folded []string
	for _, n := range m.Graph.Nodes {
		for _, mm := range placeholderRE.FindAllStringSubmatch(n.Metadata[fxNode], -1) {
			if p := mm[1]; !seen[p] {
				seen[p] = true
				if !held(p) {
					folded = append(folded, p)
				}
			}
		}
	}
	if len(folded) == 0 {
		return nil
	}
	sort.Strings(folded)
	return []string{fmt.Sprintf("%d parameter(s) have no initializer of their own (the exporter folded "+
		"them into constants or merged equal ones), so training this graph will not update them as "+
		"PyTorch does: %s", len(folded), strings.Join(folded, ", "))}
}

// alnumLower keeps the letters and digits of s, lower-cased: torch.export's
// placeholder spelling ("p_blocks_0_ln_2_weight") and the parameter's name
// ("blocks.0.ln_2.weight") then compare equal.
func alnumLower(s string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// checkOps reports every op lcc cannot lower, with its domain, opset and a node.
func checkOps(m *Model) error {
	var bad []string
	seen := map[string]bool{}
	for i := range m.Graph.Nodes {
		n := &m.Graph.Nodes[i]
		if n.Domain == "" && (lowerings[n.OpType] != nil || sequenceLowerings[n.OpType] != nil) {
			if err := opVersionError(n.OpType, m.Opsets[""]); err != nil {
				bad = append(bad, fmt.Sprintf("%v at %s", err, n.String()))
			}
			continue
		}
		key := n.Domain + "/" + n.OpType
		if seen[key] {
			continue
		}
		seen[key] = true
		dom := n.Domain
		if dom == "" {
			dom = "ai.onnx"
		}
		bad = append(bad, fmt.Sprintf("op %s (domain %q, opset %d) at %s", n.OpType, dom,
			m.Opsets[n.Domain], n.String()))
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%s: %w: %s", m.Source, ErrUnsupported, strings.Join(bad, "; "))
}

// val is an ONNX value during lowering: an IR value, a known constant, or both;
// or the transpose of weight wt (a folded Linear weight), built when first read.
type val struct {
	v  *ir.Value
	c  *tensor.Tensor
	wt *ir.Value
	// seq holds the elements of a sequence known at compile time (lower_sequence.go).
	seq []*val
}

type lowerer struct {
	m    *Model
	opts ImportOptions
	b    *ir.Builder
	env  map[string]*val
	// bound holds the inputs bound to their given values (ImportOptions.InputValues).
	bound map[string]*tensor.Tensor
	// prov and plan are the exporter's parameter provenance and what the
	// importer made of it (see params.go); nil for files without it.
	prov *provenance
	plan *paramPlan
	// cse is what splitCSE gave back to readers of nodes the exporter merged.
	cse cseSplit
	// clipped describes the first Slice that asked for more than its input holds
	// (see lowerSlice): a later shape error is then most likely a sequence longer
	// than a learned table, and the error says so.
	clipped string
	// readerSources maps each value to the placeholders of its readers (see
	// sources), built on first use.
	readerSources map[string][]string
}

func (l *lowerer) isLabel(name string) bool {
	if l.opts.LabelInputs != nil {
		for _, n := range l.opts.LabelInputs {
			if n == name {
				return true
			}
		}
		return false
	}
	return name == "labels" || name == "label" || name == "targets"
}

func (l *lowerer) params() error {
	g := &l.m.Graph
	isInit := map[string]bool{}
	for _, n := range g.InitializerNames {
		isInit[n] = true
	}
	for _, in := range g.Inputs {
		if isInit[in.Name] {
			continue
		}
		t, err := l.inputType(in)
		if err != nil {
			return fmt.Errorf("%s: input %q: %w", l.m.Source, in.Name, err)
		}
		role := ir.RoleInput
		if in.DType.IsInt() && l.isLabel(in.Name) {
			role = ir.RoleLabel
		}
		l.env[in.Name] = &val{v: l.b.Func().AddParam(in.Name, role, t, nil)}
	}
	if l.prov = readProvenance(l.m); l.prov != nil {
		l.planParams(l.prov)
		return nil
	}
	for _, name := range g.InitializerNames {
		t := g.Initializers[name]
		// Float tensors of rank >= 1 are weights; integer, boolean and scalar
		// initializers are constants the exporter hoisted (shapes, eps, -inf).
		if t.DType.IsFloat() && len(t.Shape) > 0 {
			v := l.b.Weight(name, t)
			v.Param.Origin, v.Param.OriginTransposed = l.origin(name, len(t.Shape))
			v.Param.Sources = l.sources(name)
			l.env[name] = &val{v: v}
			continue
		}
		l.env[name] = &val{c: t}
	}
	return nil
}

func (l *lowerer) inputType(in ValueInfo) (ir.Type, error) {
	if in.DType == tensor.Invalid {
		return ir.Type{}, fmt.Errorf("unsupported element type")
	}
	t := ir.Type{DType: in.DType}
	if s, ok := l.opts.InputShapes[in.Name]; ok {
		if n, err := tensor.Numel(s); err == nil && n == 1 && in.HasShape && len(in.Dims) == 0 {
			s = nil // one element given for a declared scalar (ONNX's own tests do this)
		}
		if in.HasShape && len(s) != len(in.Dims) {
			return ir.Type{}, fmt.Errorf("given shape %s has rank %d, the model declares rank %d",
				tensor.Brief(s), len(s), len(in.Dims))
		}
		t.Shape = append([]int64{}, s...)
	} else if !in.HasShape {
		return ir.Type{}, fmt.Errorf("%w: the model gives no shape; pass its shape", ErrUnboundDim)
	}
	labels := make([]string, len(in.Dims))
	hasLabel := false
	for i, d := range in.Dims {
		labels[i] = d.Param
		hasLabel = hasLabel || d.Param != ""
		if t.Shape != nil && len(t.Shape) == len(in.Dims) && l.opts.InputShapes[in.Name] != nil {
			if d.Known && d.Value != t.Shape[i] {
				return ir.Type{}, fmt.Errorf("given dim %d is %d, the model fixes it at %d", i, t.Shape[i], d.Value)
			}
			if d.Param != "" && t.Shape[i] <= 0 {
				// An empty sequence would import, then fail far away (a reshape's "rank").
				return ir.Type{}, fmt.Errorf("the given tensor has %s=%d (shape %v); %s needs a positive size",
					d.Param, t.Shape[i], tensor.Brief(t.Shape), d.Param)
			}
			if v, ok := l.opts.Dims[d.Param]; ok && d.Param != "" && v != t.Shape[i] {
				return ir.Type{}, fmt.Errorf("the given tensor has %s=%d but the flags bind %s to %d",
					d.Param, t.Shape[i], d.Param, v)
			}
			continue
		}
		switch {
		case d.Known:
			t.Shape = append(t.Shape, d.Value)
		case d.Param != "":
			v, ok := l.opts.Dims[d.Param]
			if !ok {
				return ir.Type{}, fmt.Errorf("%w: dim %d %q (pass --shape %s=N%s)", ErrUnboundDim,
					i, d.Param, d.Param, flagHint(d.Param))
			}
			if v <= 0 {
				return ir.Type{}, fmt.Errorf("dim %q bound to %d, want > 0", d.Param, v)
			}
			t.Shape = append(t.Shape, v)
		default:
			return ir.Type{}, fmt.Errorf("%w: dim %d has no size and no name", ErrUnboundDim, i)
		}
	}
	if hasLabel {
		t.Labels = labels
	}
	if _, err := tensor.Numel(t.Shape); err != nil {
		return ir.Type{}, err
	}
	return t, nil
}

func flagHint(param string) string {
	switch strings.ToLower(param) {
	case "seq", "sequence", "sequence_length", "seq_len", "seqlen":
		return " or --seq-len N"
	case "batch", "batch_size", "n":
		return " or --batch N"
	}
	return ""
}

// value returns the IR value of an ONNX value, emitting a constant into b if the
// value is only known as a constant.
func (l *lowerer) value(b *ir.Builder, name string) (*ir.Value, error) {
	e, ok := l.env[name]
	if !ok {
		return nil, fmt.Errorf("value %q is not defined", name)
	}
	if e.seq != nil {
		return nil, fmt.Errorf("value %q is a sequence, read here as a tensor (lcc lowers sequences only "+
			"into the sequence ops that read them)", name)
	}
	return l.valueOf(b, e)
}

// valueOf is e, a tensor, as a value of b.
func (l *lowerer) valueOf(b *ir.Builder, e *val) (*ir.Value, error) {
	if e.seq != nil {
		return nil, fmt.Errorf("a sequence holds a sequence; lcc lowers sequences of tensors only")
	}
	if b != l.b {
		if e.c != nil {
			return b.Const(e.c), nil
		}
		return nil, fmt.Errorf("lcc: BUG: folding reads a non-constant value")
	}
	if e.v == nil && e.wt != nil {
		e.v = b.Transpose(e.wt, 1, 0)
	}
	if e.v == nil {
		e.v = b.Const(e.c)
	}
	return e.v, nil
}

// node lowers one ONNX node. When every input is a known constant, the node is
// lowered into a scratch function and evaluated on the CPU; results within the
// fold limit become constants.
func (l *lowerer) node(n *Node) error {
	if seq, ok := sequenceLowerings[n.OpType]; ok && n.Domain == "" {
		return l.sequenceNode(n, seq)
	}
	lower := lowerings[n.OpType]
	allConst := true
	for _, in := range n.Inputs {
		if in == "" {
			continue
		}
		e, ok := l.env[in]
		if !ok {
			return fmt.Errorf("input %q is not defined", in)
		}
		allConst = allConst && e.c != nil
	}
	if allConst {
		folded, err := l.fold(n, lower)
		if err != nil {
			return err
		}
		if folded {
			return nil
		}
	}
	c := &nodeCtx{l: l, n: n, b: l.b}
	l.b.SetName(nodeName(n))
	restore := l.redirect(n)
	outs, err := lower(c)
	restore()
	if err == nil {
		err = l.b.Err()
	}
	if err != nil {
		return err
	}
	if l.plan != nil {
		if bias, ok := l.plan.restored[n]; ok && len(outs) == 1 {
			// The exporter dropped this Gemm's zero bias; PyTorch trains it.
			outs[0] = l.b.Add(outs[0], l.plan.held[bias].w)
		}
	}
	return l.bind(n, outs, nil)
}

func nodeName(n *Node) string {
	if n.Name != "" {
		return n.Name
	}
	for _, o := range n.Outputs {
		if o != "" {
			return o
		}
	}
	return n.OpType
}

func (l *lowerer) bind(n *Node, outs []*ir.Value, consts []*tensor.Tensor) error {
	for i, name := range n.Outputs {
		if name == "" {
			continue
		}
		if i >= len(outs) && i >= len(consts) {
			return fmt.Errorf("%w: output %d (%q) is not supported", ErrUnsupported, i, name)
		}
		e := &val{}
		if consts != nil {
			e.c = consts[i]
		} else {
			e.v = outs[i]
			// Shape, Size and the like give constants even from run-time inputs.
			if d := e.v.Def; d != nil && d.Op == ir.OpConstant {
				e.c = d.AttrTensor("value")
			}
		}
		l.env[name] = e
	}
	return nil
}

func (l *lowerer) fold(n *Node, lower lowerFunc) (bool, error) {
	sb := ir.NewBuilder("fold")
	c := &nodeCtx{l: l, n: n, b: sb}
	outs, err := lower(c)
	if err == nil {
		err = sb.Err()
	}
	if err != nil {
		return false, err
	}
	for _, o := range outs {
		if o.Type.Numel() > l.opts.FoldLimit {
			return false, nil
		}
	}
	for i, o := range outs {
		sb.Output(fmt.Sprint(i), o)
	}
	f, err := sb.Build()
	if err != nil {
		return false, err
	}
	// The lowering's own steps are bounded too: a constant Pad's padding block is
	// as large as the file's pads say, whatever the size of the result.
	for _, n := range f.Body {
		for _, r := range n.Results {
			if r.Type.Numel() > l.opts.FoldLimit {
				return false, nil
			}
		}
	}
	res, err := interp.Run(f, nil, interp.Options{Precision: tensor.F32})
	if err != nil {
		return false, fmt.Errorf("evaluating a constant: %w", err)
	}
	consts := make([]*tensor.Tensor, len(outs))
	for i := range outs {
		consts[i] = res[fmt.Sprint(i)]
	}
	return true, l.bind(n, nil, consts)
}

// foldedFrom is the metadata key onnxscript's optimizer (used by PyTorch's
// exporter) writes on a value it made by constant folding, listing its sources.
const foldedFrom = "pkg.onnxscript.optimizer.folded_from"

// origin follows an initializer's folded_from chain back to the framework
// parameter it came from. A 2-D weight folded from one parameter and read as the
// right operand of MatMul is a Linear layer's Wᵀ: PyTorch computes x·Wᵀ, and the
// exporter folds the transpose into the initializer.
func (l *lowerer) origin(name string, rank int) (string, bool) {
	src := map[string]string{}
	for _, vs := range [][]ValueInfo{l.m.Graph.ValueInfo, l.m.Graph.Inputs, l.m.Graph.Outputs} {
		for _, v := range vs {
			if list, ok := v.Metadata[foldedFrom]; ok {
				if from := parseSingleList(list); from != "" {
					src[v.Name] = from
				}
			}
		}
	}
	root := name
	for i := 0; i < 16; i++ {
		from, ok := src[root]
		if !ok {
			break
		}
		root = from
	}
	if root == name {
		return "", false
	}
	transposed := false
	if rank == 2 {
		for _, n := range l.m.Graph.Nodes {
			if n.OpType == "MatMul" && len(n.Inputs) == 2 && n.Inputs[1] == name {
				transposed = true
			}
		}
	}
	return root, transposed
}

// fxNode is the metadata key under which PyTorch's exporter records the FX node
// an ONNX node came from, e.g. "%linear : [...] = call_function[...](args =
// (%x, %p_blocks_0_qkv_weight, %p_blocks_0_qkv_bias), ...)".
const fxNode = "pkg.torch.onnx.fx_node"

var placeholderRE = regexp.MustCompile(`%(p_[A-Za-z0-9_]+)`)

// sources lists the parameter placeholders named by the FX nodes of the ONNX
// nodes that read initializer name (sorted, unique). The map of every value's
// is built once: a scan of the graph per initializer would be quadratic in the
// model's size.
func (l *lowerer) sources(name string) []string {
	if l.readerSources == nil {
		seen := map[string]map[string]bool{}
		for _, n := range l.m.Graph.Nodes {
			phs := placeholderRE.FindAllStringSubmatch(n.Metadata[fxNode], -1)
			if len(phs) == 0 {
				continue
			}
			for _, in := range n.Inputs {
				if seen[in] == nil {
					seen[in] = map[string]bool{}
				}
				for _, m := range phs {
					seen[in][m[1]] = true
				}
			}
		}
		l.readerSources = make(map[string][]string, len(seen))
		for in, set := range seen {
			out := make([]string, 0, len(set))
			for s := range set {
				out = append(out, s)
			}
			sort.Strings(out)
			l.readerSources[in] = out
		}
	}
	return slices.Clone(l.readerSources[name])
}

// parseSingleList reads a Python list literal of one string: "['a.b']" -> "a.b".
func parseSingleList(s string) string {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return ""
	}
	inner := strings.TrimSpace(s[1 : len(s)-1])
	if strings.Contains(inner, ",") || len(inner) < 2 {
		return ""
	}
	if q := inner[0]; (q == '\'' || q == '"') && inner[len(inner)-1] == q {
		return inner[1 : len(inner)-1]
	}
	return ""
}
