package onnx

// Which initializers are parameters, and which parameters they are.
//
// PyTorch's exporter (torch.onnx.export(dynamo=True)) runs onnxscript's optimizer,
// which changes the model's parameters in ways that training the file as written
// would get wrong:
//   - it folds a Linear weight's transpose into a new initializer ("val_9" = Wᵀ);
//   - it merges initializers whose values are equal: freshly initialised norm
//     scales are all ones, so every LayerNorm or RMSNorm scale becomes one tensor,
//     and training it would tie them;
//   - it drops a Gemm's bias when that bias is zero, freezing it at zero;
//   - it stores constants it computed (RoPE frequencies, the attention scale)
//     as initializers beside the parameters.
//
// The exporter records enough to undo this. The graph's metadata holds
// torch.export's graph signature ("p_blocks_0_ln2_weight: PARAMETER
// target='blocks.0.ln2.weight'"); each ONNX node names the FX node it came from,
// with the parameter placeholders that node read; each folded value lists what it
// was folded from. From these the importer trains exactly PyTorch's parameters:
// every parameter gets a weight of its own, named as in PyTorch's state dict and
// laid out as PyTorch holds it (a folded Wᵀ is read as matmul(x, W) {transpose_b});
// a merged initializer's readers are given back the parameter their FX node read;
// a dropped zero bias is restored; initializers that are not parameters become
// constants. Parameters PyTorch itself ties (GPT-2's embedding and head) are one
// placeholder in the FX graph and stay one weight.
//
// A file without a graph signature (another exporter, a hand-made model) keeps the
// older rule: every float initializer of rank >= 1 is a weight.

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// signatureKey is the graph metadata key of torch.export's graph signature.
const signatureKey = "pkg.torch.export.ExportedProgram.graph_signature"

// signatureRE reads one input of the signature: placeholder, kind and target.
var signatureRE = regexp.MustCompile(`(?m)^\s*([A-Za-z0-9_]+): ([A-Z_]+) target='([^']*)'`)

// fxArgRE finds the placeholders an FX node reads ("%p_blocks_0_qkv_weight").
var fxArgRE = regexp.MustCompile(`%([A-Za-z0-9_]+)`)

// fxTargetRE reads an FX node's op ("torch.ops.aten.linear.default").
var fxTargetRE = regexp.MustCompile(`call_function\[target=([A-Za-z0-9_.]+)\]\(args = \(%([A-Za-z0-9_]+)`)

// provenance is what the exporter recorded about the model's parameters.
type provenance struct {
	target map[string]string // placeholder -> parameter name, PARAMETER inputs only
	order  map[string]int    // parameter name -> position in the signature
	folded map[string]string // value -> the one value it was folded from
}

// readProvenance returns the exporter's records, or nil when the file has no
// graph signature naming a parameter.
func readProvenance(m *Model) *provenance {
	p := &provenance{target: map[string]string{}, order: map[string]int{}, folded: map[string]string{}}
	for _, mm := range signatureRE.FindAllStringSubmatch(m.Graph.Metadata[signatureKey], -1) {
		if mm[2] == "PARAMETER" {
			p.target[mm[1]] = mm[3]
			if _, ok := p.order[mm[3]]; !ok {
				p.order[mm[3]] = len(p.order)
			}
		}
	}
	if len(p.target) == 0 {
		return nil
	}
	for _, vs := range [][]ValueInfo{m.Graph.ValueInfo, m.Graph.Inputs, m.Graph.Outputs} {
		for _, v := range vs {
			if from := parseSingleList(v.Metadata[foldedFrom]); from != "" {
				p.folded[v.Name] = from
			}
		}
	}
	return p
}

// root follows name's folded_from chain to its start.
func (p *provenance) root(name string) string {
	for i := 0; i < 16; i++ {
		from, ok := p.folded[name]
		if !ok {
			break
		}
		name = from
	}
	return name
}

// isParam reports whether name is a PyTorch parameter.
func (p *provenance) isParam(name string) bool {
	_, ok := p.order[name]
	return ok
}

// nodeParams lists the parameters n's FX node read, in argument order.
func (p *provenance) nodeParams(n *Node) []string {
	var out []string
	for _, mm := range fxArgRE.FindAllStringSubmatch(fxArgs(n.Metadata[fxNode]), -1) {
		if t, ok := p.target[mm[1]]; ok {
			out = append(out, t)
		}
	}
	return out
}

// fxArgs is the part of an FX node's text after its op, where its arguments are.
func fxArgs(s string) string {
	if i := strings.Index(s, "call_function["); i >= 0 {
		return s[i:]
	}
	return ""
}

// fxOp returns the op of n's FX node and its first argument's placeholder.
func fxOp(n *Node) (op, first string) {
	if mm := fxTargetRE.FindStringSubmatch(n.Metadata[fxNode]); mm != nil {
		return mm[1], mm[2]
	}
	return "", ""
}

// weightRef is how an ONNX value reads a parameter's weight: the weight itself,
// or (a folded Linear weight) its transpose.
type weightRef struct {
	w          *ir.Value
	transposed bool
}

func (r weightRef) val() *val {
	if r.transposed {
		return &val{wt: r.w}
	}
	return &val{v: r.w}
}

// paramPlan is the importer's decision for a model with provenance.
type paramPlan struct {
	// held maps each parameter a weight stands for to that weight.
	held map[string]weightRef
	// initParam maps an initializer that holds a parameter (itself or its folded
	// transpose) to that parameter.
	initParam map[string]string
	// uses redirects a node's read of a merged initializer to the parameter its FX
	// node read: node -> initializer -> parameter.
	uses map[*Node]map[string]string
	// restored maps a Gemm whose zero bias the exporter dropped to that bias.
	restored map[*Node]string
	// untied and restoredNames are reported to the user.
	untied, restoredNames []string
}

// planParams creates the weights of a model with provenance: one per PyTorch
// parameter, in initializer order, each merged parameter right after the
// initializer it was merged into. Other initializers become constants (or, past
// the fold limit, frozen weights).
func (l *lowerer) planParams(prov *provenance) {
	g := &l.m.Graph
	plan := &paramPlan{held: map[string]weightRef{}, initParam: map[string]string{},
		uses: map[*Node]map[string]string{}, restored: map[*Node]string{}}
	l.plan = plan
	transposed := map[string]bool{}
	for _, name := range g.InitializerNames {
		t := g.Initializers[name]
		if !t.DType.IsFloat() {
			continue
		}
		switch r := prov.root(name); {
		case prov.isParam(name):
			plan.initParam[name] = name
		case r != name && prov.isParam(r) && l.foldedLinear(prov, name):
			plan.initParam[name] = r
			transposed[name] = true
		case r != name && prov.isParam(r):
			// Folded from a parameter some other way: train the folded tensor, as
			// before, and say where it came from.
			plan.initParam[name] = r
		}
	}
	// Which parameter each read of a parameter-holding initializer stands for.
	isHeld := map[string]string{} // parameter -> initializer
	for _, name := range g.InitializerNames {
		if p, ok := plan.initParam[name]; ok {
			if _, dup := isHeld[p]; !dup {
				isHeld[p] = name
			}
		}
	}
	splits := map[string][]string{} // initializer -> merged parameters, signature order
	for i := range g.Nodes {
		n := &g.Nodes[i]
		read := prov.nodeParams(n)
		for _, in := range n.Inputs {
			own, ok := plan.initParam[in]
			if !ok || isHeld[own] != in {
				continue
			}
			p := resolveRead(read, own, in, isHeld)
			if p == own {
				continue
			}
			if plan.uses[n] == nil {
				plan.uses[n] = map[string]string{}
			}
			plan.uses[n][in] = p
			if !hasString(splits[in], p) {
				splits[in] = append(splits[in], p)
			}
		}
	}
	for _, name := range g.InitializerNames {
		sort.Slice(splits[name], func(i, j int) bool {
			return prov.order[splits[name][i]] < prov.order[splits[name][j]]
		})
		for _, p := range splits[name] {
			isHeld[p] = name
		}
	}
	// Gemms whose bias the exporter dropped: aten.addmm(bias, x, W) became
	// Gemm(x, W) because the bias was zero.
	restore := map[string][]*Node{} // the Gemm's weight initializer -> Gemms
	for i := range g.Nodes {
		n := &g.Nodes[i]
		op, first := fxOp(n)
		bias, isParam := prov.target[first]
		if n.OpType != "Gemm" || len(n.Inputs) != 2 || op != "torch.ops.aten.addmm.default" ||
			!isParam || isHeld[bias] != "" {
			continue
		}
		if _, ok := g.Initializers[n.Inputs[1]]; ok {
			plan.restored[n] = bias
			restore[n.Inputs[1]] = append(restore[n.Inputs[1]], n)
		}
	}

	var scratch []float64 // transposeInPlace's, the size of the largest folded weight
	for _, name := range g.InitializerNames {
		t := g.Initializers[name]
		p, isParam := plan.initParam[name]
		held, tied := plan.held[p]
		switch {
		case isParam && tied && (p == name || transposed[name]) && heldAsParam(held.w, p):
			// A tied weight (Gemma's embedding and head) the exporter stored twice, as
			// W for the Gather and as its folded Wᵀ for the MatMul: one weight.
			l.env[name] = weightRef{held.w, transposed[name]}.val()
		case isParam && transposed[name]:
			wt := transpose2D
			if l.opts.Consume && len(splits[name]) == 0 {
				wt = func(t *tensor.Tensor) *tensor.Tensor { return transposeInPlace(t, &scratch) }
			}
			w := l.weight(p, wt(t), prov, name)
			plan.held[p] = weightRef{w, true}
			l.env[name] = &val{wt: w}
		case isParam:
			w := l.weight(name, t, prov, name)
			if p != name {
				w.Param.Origin = p
			}
			plan.held[p] = weightRef{w, false}
			l.env[name] = &val{v: w}
		case t.DType.IsFloat() && t.Numel() > int(l.opts.FoldLimit):
			// Too large to fold (a precomputed table): a weight that is not trained.
			w := l.b.Weight(name, t)
			w.Param.Frozen = true
			l.env[name] = &val{v: w}
		default:
			l.env[name] = &val{c: t}
		}
		for _, s := range splits[name] {
			data := t.Clone()
			if transposed[name] {
				data = transpose2D(t)
			}
			plan.held[s] = weightRef{l.weight(s, data, prov, ""), transposed[name]}
			plan.untied = append(plan.untied, fmt.Sprintf("%s (merged into %s)", s, name))
		}
		if l.opts.Consume && isParam && transposed[name] {
			// The weight holds t's transpose (in t's own storage, or a copy
			// where merged parameters read t too); the Model keeps its dtype and
			// shape.
			g.Initializers[name] = &tensor.Tensor{DType: t.DType, Shape: slices.Clone(t.Shape)}
		}
		for _, n := range restore[name] {
			bias := plan.restored[n]
			if _, done := plan.held[bias]; done {
				continue
			}
			cols := t.Shape[len(t.Shape)-1]
			if nodeInt(n, "transB") != 0 {
				cols = t.Shape[0]
			}
			w := l.weight(bias, tensor.New(t.DType, cols), prov, "")
			plan.held[bias] = weightRef{w, false}
			plan.restoredNames = append(plan.restoredNames, bias)
		}
	}
}

// heldAsParam reports whether w holds parameter p in PyTorch's layout (p's own
// initializer or its folded transpose), so that another copy of p can read it.
func heldAsParam(w *ir.Value, p string) bool {
	return w.Param.Name == p && w.Param.Origin == ""
}

// weight adds a weight named name holding t; init is the initializer it comes
// from ("" for a weight lcc made), whose readers' placeholders become Sources.
func (l *lowerer) weight(name string, t *tensor.Tensor, prov *provenance, init string) *ir.Value {
	v := l.b.Weight(name, t)
	if init != "" {
		v.Param.Sources = l.sources(init)
	}
	for ph, target := range prov.target {
		if target == name && !hasString(v.Param.Sources, ph) {
			v.Param.Sources = append(v.Param.Sources, ph)
		}
	}
	sort.Strings(v.Param.Sources)
	return v
}

// resolveRead picks which parameter a node's read of initializer init (which
// holds parameter own) stands for, among the parameters the node's FX node read
// that no other initializer holds. Several left (a LayerNorm whose scale and bias
// were both merged) are told apart by the longest common suffix with own
// ("blocks.1.ln2.weight" for "blocks.0.ln1.weight", not "blocks.1.ln2.bias"). The
// pick must be the same kind of parameter as own (the same last name component,
// "weight" or "bias"); a tie, a different kind or nothing left keeps own.
func resolveRead(read []string, own, init string, isHeld map[string]string) string {
	var cands []string
	for _, p := range read {
		if h := isHeld[p]; (h == "" || h == init) && !hasString(cands, p) {
			cands = append(cands, p)
		}
	}
	best, bestLen, tie := own, -1, false
	for _, p := range cands {
		n := commonSuffix(p, own)
		switch {
		case n > bestLen:
			best, bestLen, tie = p, n, false
		case n == bestLen:
			tie = true
		}
	}
	if tie || lastComponent(best) != lastComponent(own) {
		return own
	}
	return best
}

func lastComponent(name string) string { return name[strings.LastIndex(name, ".")+1:] }

func commonSuffix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return n
}

func hasString(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// foldedLinear reports whether initializer name is a Linear weight's folded
// transpose: 2-D, and read only as the right operand of MatMuls made from
// aten.linear.
func (l *lowerer) foldedLinear(prov *provenance, name string) bool {
	if len(l.m.Graph.Initializers[name].Shape) != 2 {
		return false
	}
	read := false
	for i := range l.m.Graph.Nodes {
		n := &l.m.Graph.Nodes[i]
		for j, in := range n.Inputs {
			if in != name {
				continue
			}
			op, _ := fxOp(n)
			if n.OpType != "MatMul" || j != 1 || op != "torch.ops.aten.linear.default" {
				return false
			}
			read = true
		}
	}
	return read
}

func nodeInt(n *Node, name string) int64 {
	if a, ok := n.Attrs[name]; ok && a.Kind == AttrInt {
		return a.Int
	}
	return 0
}

// transposeInPlace returns t's transpose in t's own storage, through
// *scratch (grown to t's size and reused): t's elements are then the
// transpose's, so t is not read again as itself. An import that consumes its
// model (ImportOptions.Consume) so holds each folded weight once, and leaves no
// garbage of the size of the model for the collector to find.
func transposeInPlace(t *tensor.Tensor, scratch *[]float64) *tensor.Tensor {
	r, c := t.Shape[0], t.Shape[1]
	if int64(cap(*scratch)) < r*c {
		*scratch = make([]float64, r*c)
	}
	src := (*scratch)[:r*c]
	copy(src, t.F)
	transposeInto(t.F, src, r, c)
	return &tensor.Tensor{DType: t.DType, Shape: []int64{c, r}, F: t.F}
}

// transpose2D returns t's transpose as a new tensor.
func transpose2D(t *tensor.Tensor) *tensor.Tensor {
	r, c := t.Shape[0], t.Shape[1]
	out := tensor.New(t.DType, c, r)
	transposeInto(out.F, t.F, r, c)
	return out
}

// transposeInto writes the transpose of the r×c matrix src into dst (c×r).
func transposeInto(dst, src []float64, r, c int64) {
	for i := int64(0); i < r; i++ {
		for j := int64(0); j < c; j++ {
			dst[j*r+i] = src[i*c+j]
		}
	}
}

// paramNotes warns, after lowering, about the parameters no weight stands for:
// read by the FX nodes or named by a fold, the exporter folded them into constants
// in a way the importer cannot undo; or read through a node the exporter's CSE
// merged that splitCSE could not tell apart. Training leaves them frozen, so they
// are also returned as the function's Untrained parameters.
func (l *lowerer) paramNotes(prov *provenance) (notes, untrained []string) {
	var missing []string
	seen := map[string]bool{}
	add := func(p string) {
		if _, ok := l.plan.held[p]; !ok && prov.isParam(p) && !seen[p] {
			seen[p] = true
			missing = append(missing, p)
		}
	}
	for i := range l.m.Graph.Nodes {
		for _, p := range prov.nodeParams(&l.m.Graph.Nodes[i]) {
			add(p)
		}
	}
	for _, vs := range [][]ValueInfo{l.m.Graph.ValueInfo, l.m.Graph.Inputs, l.m.Graph.Outputs} {
		for _, v := range vs {
			for _, p := range parseList(v.Metadata[foldedFrom]) {
				add(p)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		notes = append(notes, fmt.Sprintf("%d parameter(s) have no initializer of their own (the exporter "+
			"folded them into constants), so training this graph will not update them as PyTorch does: %s",
			len(missing), strings.Join(missing, ", ")))
	}
	var merged []string
	for _, p := range l.cse.unread {
		if _, ok := l.plan.held[p]; !ok && !seen[p] {
			seen[p] = true
			merged = append(merged, p)
		}
	}
	if len(merged) > 0 {
		notes = append(notes, fmt.Sprintf("%d parameter(s) are read by no node: the exporter merged their "+
			"nodes or folded constants with another parameter's (common-subexpression elimination) in a way "+
			"the file does not let lcc undo, so training this graph will not update them as PyTorch does: %s",
			len(merged), strings.Join(merged, ", ")))
	}
	return notes, uniqueSorted(append(missing, merged...))
}

// redirect points n's reads of merged initializers at the parameters n's FX node
// read, until the returned function restores the environment.
func (l *lowerer) redirect(n *Node) func() {
	if l.plan == nil || l.plan.uses[n] == nil {
		return func() {}
	}
	saved := map[string]*val{}
	for in, p := range l.plan.uses[n] {
		saved[in] = l.env[in]
		l.env[in] = l.plan.held[p].val()
	}
	return func() {
		for in, v := range saved {
			l.env[in] = v
		}
	}
}

// remarks says what the importer changed so that the trained model is PyTorch's.
func (p *paramPlan) remarks() []string {
	var out []string
	if len(p.untied) > 0 {
		out = append(out, fmt.Sprintf("untied %d parameter(s) the exporter had merged with an equal one; "+
			"each is trained as its own parameter, as in PyTorch: %s", len(p.untied), strings.Join(p.untied, ", ")))
	}
	if len(p.restoredNames) > 0 {
		out = append(out, fmt.Sprintf("restored %d zero bias(es) the exporter had folded away: %s",
			len(p.restoredNames), strings.Join(p.restoredNames, ", ")))
	}
	return out
}

// transposedWeight returns the weight W when input i is a folded Linear weight
// (it holds Wᵀ), else nil.
func (c *nodeCtx) transposedWeight(i int) *ir.Value {
	if !c.has(i) || c.b != c.l.b {
		return nil
	}
	if e := c.l.env[c.n.Inputs[i]]; e != nil {
		return e.wt
	}
	return nil
}
