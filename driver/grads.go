package driver

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// Objective says what `lcc check --grads` and training differentiate.
type Objective struct {
	Loss  string            // a scalar output to differentiate, or ""
	Seeds map[string]string // output name -> cotangent input name (Σ out ⊙ dy)
	// Added reports that the loss was added by lcc (cross-entropy of the logits).
	Added bool
}

func outputNames(f *ir.Func) string {
	var ns []string
	for _, o := range f.Outputs {
		ns = append(ns, o.Name)
	}
	return strings.Join(ns, ", ")
}

// ChooseObjective picks the objective for a check against ref, in the order of
// issue #3: REF dy → Σ out ⊙ dy; a model that computes a scalar loss → itself;
// REF labels → mean cross-entropy of the logits (added to f). Package loss
// decides which output is the loss and which the logits.
func ChooseObjective(f *ir.Func, ref *safetensors.File) (Objective, error) {
	if dy, ok := ref.Tensors["dy"]; ok {
		for _, o := range f.Outputs {
			if o.Value.Type.DType.IsFloat() && o.Value.Type.Numel() == int64(dy.Numel()) {
				return Objective{Seeds: map[string]string{o.Name: "dy"}}, nil
			}
		}
		return Objective{}, fmt.Errorf("reference dy %v fits no output (outputs: %s)", dy.Shape, outputNames(f))
	}
	if name, err := loss.ModelLoss(f); err == nil {
		return Objective{Loss: name}, nil
	}
	if _, ok := ref.Tensors[loss.Labels]; ok {
		c, err := loss.Apply(f, loss.CrossEntropy, true)
		if err != nil {
			return Objective{}, err
		}
		return Objective{Loss: c.Loss, Added: true}, nil
	}
	return Objective{}, fmt.Errorf("no objective: the reference has neither dy nor labels, and the model has no scalar output")
}

// CheckGrads runs the forward and backward of f on the reference inputs and
// compares outputs, the loss (REF "loss") and every REF "grad.<name>".
//
// Exporters fold a weight's transpose into a new initializer (PyTorch's Linear
// becomes MatMul by an initializer "val_9" = weightᵀ). A REF gradient whose name is
// not a parameter is matched through REF "param.<name>": the parameter holding
// exactly that tensor, or its transpose, carries its gradient (transposed back).
func CheckGrads(f *ir.Func, ref *safetensors.File, refPath string, opts CheckOptions) (*CheckResult, error) {
	g := f.Clone()
	obj, err := ChooseObjective(g, ref)
	if err != nil {
		return nil, err
	}
	p, err := newPipeline(targets.Target{}, Options{Objective: &obj})
	if err != nil {
		return nil, err
	}
	if _, err := passes.Run(g, p.passes, passes.Options{VerifyEach: true}); err != nil {
		return nil, err
	}
	gf := g
	outs, emu, note, err := opts.runOnRef(gf, ref, refPath)
	if err != nil {
		return nil, err
	}
	res := &CheckResult{Outputs: outs, Emulated: note}
	add := func(name string, got, want *tensor.Tensor) error {
		return res.record(compareTo(name, got, want, emu[name], 0))
	}
	for _, o := range f.Outputs {
		if want, ok := ref.Tensors[o.Name]; ok {
			if err := add(o.Name, outs[o.Name], want); err != nil {
				return nil, err
			}
		}
	}
	// The objective's value against REF loss, unless an output of that name was
	// compared above already.
	if want, ok := ref.Tensors["loss"]; ok && obj.Loss != "" && (obj.Added || f.Output("loss") == nil) {
		c, err := compareTo("loss", outs[obj.Loss], want, emu[obj.Loss], 0)
		if err != nil {
			return nil, err
		}
		res.Comparisons = append(res.Comparisons, c)
	}
	grad := func(p *ir.Param) *tensor.Tensor { return outs[autodiff.GradPrefix+p.Name] }
	var expect func(*ir.Param) *tensor.Tensor
	if emu != nil {
		expect = func(p *ir.Param) *tensor.Tensor { return emu[autodiff.GradPrefix+p.Name] }
	}
	record := func(c Comparison) { res.Comparisons = append(res.Comparisons, c) }
	if err := compareGrads(gf, ref, refPath, opts.Out, grad, expect, opts.Storage, record); err != nil {
		return nil, err
	}
	return res, res.Print(opts)
}

// compareGrads compares every REF "grad.<name>" with grad(p) of the parameter p
// that holds it (see matchGrads) and records each comparison; where expect is
// not nil, it compares with expect(p) instead, with REF's error beside it (see
// CheckOptions.Storage). The importer gives every framework parameter its own
// weight when the exporter's provenance allows; without it, a weight standing
// for several REF names (equal initializers merged by the exporter) is compared
// with the sum of their gradients. REF gradients of parameters the exporter
// folded away are reported as skipped.
//
// A gradient that is zero in exact arithmetic (a key projection's bias: softmax
// ignores a shift that is equal for every key) holds only rounding noise in both
// lcc and the reference, so its relative error says nothing. One the graph's
// structure makes zero (exactZeroGrads), or whose REF norm is below
// ZeroGradFloor(REF's dtype) times the largest REF gradient's norm, has its error
// measured against ZeroGradFloor(storage) times that norm, the noise the run's
// storage may leave on it.
func compareGrads(f *ir.Func, ref *safetensors.File, refPath string, out io.Writer,
	grad, expect func(*ir.Param) *tensor.Tensor, storage tensor.DType, record func(Comparison)) error {
	groups, order, missing := matchGrads(f, ref)
	zero := exactZeroGrads(f)
	largest := 0.0
	for _, key := range ref.Names {
		if strings.HasPrefix(key, autodiff.GradPrefix) {
			largest = max(largest, norm(ref.Tensors[key]))
		}
	}
	if len(missing) > 0 && len(order) == 0 {
		return fmt.Errorf("%s: no model parameter holds %s (by name, by the exporter's folded_from "+
			"provenance, or by the value of param.<name>)", refPath, strings.Join(missing, ", "))
	}
	// PyTorch's exporter folds parameters it sees as constants (an all-zero bias
	// disappears from Gemm); such a gradient has no parameter in the file.
	for _, name := range missing {
		fmt.Fprintf(out, "skipped grad.%s: no parameter of the exported graph holds it "+
			"(the exporter folded it away)\n", name)
	}
	for _, p := range order {
		g := groups[p]
		got := grad(p)
		want := tensor.New(tensor.F32, got.Shape...)
		var names []string
		refDType := tensor.F32
		for _, m := range g {
			w := ref.Tensors[autodiff.GradPrefix+m.name]
			refDType = w.DType
			if m.transposed {
				w = transpose2(w)
			}
			if w.Numel() != want.Numel() {
				return fmt.Errorf("%s: grad.%s is %v, parameter %s is %v", refPath, m.name, w.Shape, p.Name, got.Shape)
			}
			for i := range want.F {
				want.F[i] += w.Float(i)
			}
			names = append(names, m.name+tr(m.transposed))
		}
		label := "grad." + strings.Join(names, "+")
		if len(g) > 1 || g[0].name != p.Name {
			label += " (as " + p.Name + ")"
		}
		floor := ZeroGradFloor(refDType) * largest
		switch why, exact := zero[p]; {
		case exact:
			label += " (zero in exact arithmetic: " + why + ")"
			floor = max(floor, ZeroGradFloor(storage)*largest)
		case norm(want) < floor:
			label += " (zero up to rounding)"
			floor = max(floor, ZeroGradFloor(storage)*largest)
		}
		var e *tensor.Tensor
		if expect != nil {
			e = expect(p)
		}
		c, err := compareTo(label, got, want, e, floor)
		if err != nil {
			return err
		}
		record(c)
	}
	return nil
}

// ZeroGradFloor is the fraction of the largest reference gradient's norm below
// which a gradient computed with values stored in dt counts as zero up to
// rounding (see compareGrads). Such a gradient is a sum of terms that cancel; in
// dt each term carries a relative error up to dt's unit roundoff u, so its noise
// is at most about u times the cancelling terms, which the largest gradient
// bounds in these models. bf16 (8 significant bits): u = 2^-8. f32: 1e-6, about
// 17u, as measured on the test models: exact zeros computed in f32 lie near
// 1e-11 of the largest gradient, and the smallest real gradient (hf_bert's query
// biases) at 1.7e-5. A real gradient keeps its own norm: the floor is only
// applied to gradients that REF (in f32) finds zero.
func ZeroGradFloor(dt tensor.DType) float64 {
	if u := unitRoundoff(dt); u > 0 {
		return u
	}
	return 1e-6
}

func norm(t *tensor.Tensor) float64 {
	var s float64
	for i := 0; i < t.Numel(); i++ {
		s += t.Float(i) * t.Float(i)
	}
	return math.Sqrt(s)
}

// gradMatch is one REF gradient and how it maps onto a model parameter.
type gradMatch struct {
	name       string
	transposed bool
}

// matchGrads maps every REF "grad.<name>" onto a weight of f: by name, by the
// exporter's provenance (Param.Origin), or by the value of REF "param.<name>"
// (exporters deduplicate equal initializers, so several PyTorch parameters can
// share one ONNX initializer; its gradient is then the sum of theirs).
func matchGrads(f *ir.Func, ref *safetensors.File) (map[*ir.Param][]gradMatch, []*ir.Param, []string) {
	groups := map[*ir.Param][]gradMatch{}
	var order []*ir.Param
	var missing []string
	for _, key := range ref.Names {
		if !strings.HasPrefix(key, autodiff.GradPrefix) {
			continue
		}
		name := strings.TrimPrefix(key, autodiff.GradPrefix)
		var p *ir.Param
		transposed := false
		if q := f.Param(name); q != nil && q.Role == ir.RoleWeight {
			p = q
		}
		for _, q := range f.Params {
			if p == nil && q.Role == ir.RoleWeight && q.Origin == name {
				p, transposed = q, q.OriginTransposed
			}
		}
		// A wrapper module prefixes names ("m.transformer.wte.weight").
		for _, q := range f.Params {
			if p == nil && q.Role == ir.RoleWeight && strings.HasSuffix(q.Name, "."+name) {
				p = q
			}
		}
		if p == nil {
			p, transposed = findByValue(f, ref.Tensors["param."+name], name)
		}
		if p == nil {
			missing = append(missing, name)
			continue
		}
		if _, seen := groups[p]; !seen {
			order = append(order, p)
		}
		groups[p] = append(groups[p], gradMatch{name, transposed})
	}
	return groups, order, missing
}

func tr(t bool) string {
	if t {
		return "ᵀ"
	}
	return ""
}

// findByValue returns the weight whose data equals want exactly, or equals its
// transpose (2-D only). Equal values of a uniform tensor are weak evidence (every
// zero bias is equal), so for those, where the importer knows which framework
// parameters a weight's readers came from (Param.Sources), name must be among them.
func findByValue(f *ir.Func, want *tensor.Tensor, name string) (*ir.Param, bool) {
	if want == nil {
		return nil, false
	}
	var wantT *tensor.Tensor
	if len(want.Shape) == 2 {
		wantT = transpose2(want)
	}
	for _, p := range f.Params {
		if p.Role != ir.RoleWeight || p.Data == nil || uniform(want) && !fromSource(p, name) {
			continue
		}
		if sameValues(p.Data, want) {
			return p, false
		}
		if wantT != nil && sameValues(p.Data, wantT) {
			return p, true
		}
	}
	return nil, false
}

// uniform reports whether every element of t is equal (a zero bias, a ones
// scale): equal values then say little about which parameter it is.
func uniform(t *tensor.Tensor) bool {
	for i := 1; i < t.Numel(); i++ {
		if t.Float(i) != t.Float(0) {
			return false
		}
	}
	return true
}

// fromSource reports whether framework parameter name may be what weight p
// stands for: p has no recorded sources, or one of them spells name (the
// exporter writes "blocks.0.ln2.weight" as placeholder "p_blocks_0_ln2_weight",
// possibly behind a wrapper's prefix).
func fromSource(p *ir.Param, name string) bool {
	if len(p.Sources) == 0 {
		return true
	}
	// torch.export may also change case and separators ("LayerNorm" becomes
	// "layer_norm"), so compare letters and digits alone, case-folded.
	want := alnum(name)
	for _, s := range p.Sources {
		if strings.HasSuffix(alnum(strings.TrimPrefix(s, "p_")), want) {
			return true
		}
	}
	return false
}

func alnum(s string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

func sameValues(a, b *tensor.Tensor) bool {
	if a.Numel() != b.Numel() || len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	for i := 0; i < a.Numel(); i++ {
		if a.Float(i) != b.Float(i) {
			return false
		}
	}
	return true
}

func transpose2(t *tensor.Tensor) *tensor.Tensor {
	r, c := t.Shape[0], t.Shape[1]
	out := tensor.New(t.DType, c, r)
	for i := int64(0); i < r; i++ {
		for j := int64(0); j < c; j++ {
			if t.DType.IsFloat() {
				out.F[j*r+i] = t.F[i*c+j]
			} else {
				out.I[j*r+i] = t.I[i*c+j]
			}
		}
	}
	return out
}
