// Package loss decides what a training step differentiates: which output of a
// model is its loss, which are its logits, and, when the model computes no loss,
// how to add one (mean cross-entropy of the logits, as PyTorch's F.cross_entropy).
//
// It is the one place lcc makes these choices; compile, check, train and export
// ask it. The rules:
//
//   - A model loss is a floating-point output of one element. When there are
//     several, the one whose name contains "loss" (case-folded) wins; if none or
//     several do, the choice is ambiguous and an error lists them.
//   - The logits are a floating-point output of rank >= 2 whose last dim, the
//     vocabulary, is larger than 1. When the model embeds integer tokens (a gather
//     along axis 0 of a table by an input or label parameter), the vocabulary is
//     that table's row count and only outputs with that last dim qualify. Exactly
//     one output must qualify.
//   - The --loss kinds: model (the model loss; an error without one),
//     cross-entropy (add mean cross-entropy of the logits against an i64 label
//     parameter "labels", ignoring label −100), none (no training step), and
//     auto: the model loss if there is one, else cross-entropy if the model has
//     logits and embeds tokens (so its vocabulary is known), else none.
//
// The insert-loss pass applies the choice and, for a training step, keeps only
// the loss output so that nothing stores the [tokens, vocab] logits and the
// fuse-cross-entropy pass can fire.
package loss

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/tensor"
)

// The kinds of the --loss flag.
const (
	Auto         = "auto"
	Model        = "model"
	CrossEntropy = "cross-entropy"
	None         = "none"
)

// Kinds lists the --loss values in the order `lcc help` shows them.
var Kinds = []string{Auto, CrossEntropy, Model, None}

const (
	// IgnoreIndex marks labels that do not count (PyTorch's default ignore_index).
	IgnoreIndex = -100
	// Output is the name of the loss output cross-entropy insertion adds.
	Output = "loss"
	// Labels is the name of the label parameter cross-entropy reads.
	Labels = "labels"
)

// FlagDoc documents --loss for every command that takes it.
const FlagDoc = "training objective: auto (the model's loss output, else cross-entropy of its " +
	"logits, else none), cross-entropy (add mean cross-entropy of the logits against labels), " +
	"model (the model's own scalar loss output) or none (no training step)"

// CheckKind validates a --loss value ("" means auto).
func CheckKind(kind string) error {
	if kind == "" || slices.Contains(Kinds, kind) {
		return nil
	}
	return fmt.Errorf("--loss %q: want %s", kind, strings.Join(Kinds, ", "))
}

// Choice is what a --loss kind resolved to for one model.
type Choice struct {
	// Kind is Model, CrossEntropy or None (never Auto).
	Kind string
	// Loss is the output to differentiate ("" for None).
	Loss string
	// Logits is the logits output, "" when the model has none that qualifies.
	Logits string
}

// ModelLoss returns the output the model computes its loss in.
func ModelLoss(f *ir.Func) (string, error) {
	name, _, err := modelLoss(f)
	return name, err
}

// modelLoss is ModelLoss that also says whether several outputs qualified.
func modelLoss(f *ir.Func) (name string, ambiguous bool, err error) {
	var scalars, named []string
	for _, o := range f.Outputs {
		if t := o.Value.Type; t.DType.IsFloat() && t.Numel() == 1 {
			scalars = append(scalars, o.Name)
			if strings.Contains(strings.ToLower(o.Name), "loss") {
				named = append(named, o.Name)
			}
		}
	}
	switch {
	case len(scalars) == 1:
		return scalars[0], false, nil
	case len(named) == 1:
		return named[0], false, nil
	case len(scalars) == 0:
		return "", false, fmt.Errorf("func @%s has no scalar float output to use as its loss (outputs: %s)",
			f.Name, OutputList(f))
	}
	return "", true, fmt.Errorf("func @%s has %d scalar float outputs (%s) and no single one named like "+
		"a loss", f.Name, len(scalars), strings.Join(scalars, ", "))
}

// Vocab returns the vocabulary of a model that embeds tokens or computes
// cross-entropy over them: the classes of a cross-entropy whose labels are a
// parameter, else the rows of the table an integer input or label parameter
// gathers from (through reshapes, as exporters view input_ids first). ok is
// false when the model shows neither.
func Vocab(f *ir.Func) (v int64, ok bool) {
	token := func(x *ir.Value) bool {
		for x.Def != nil && (x.Def.Op == ir.OpReshape || x.Def.Op == ir.OpCast) {
			x = x.Def.Args[0]
		}
		return x.Param != nil && (x.Param.Role == ir.RoleInput || x.Param.Role == ir.RoleLabel) &&
			x.Type.DType.IsInt()
	}
	for _, n := range f.Body {
		switch n.Op {
		case ir.OpFusedLinearCrossEntropy:
			if w := n.Args[1].Type; n.AttrBool("transpose_w") {
				return w.Shape[0], true
			} else {
				return w.Shape[1], true
			}
		case ir.OpSoftmaxCrossEntropy:
			if x := n.Args[0].Type; token(n.Args[1]) && x.Rank() == 2 {
				return x.Shape[1], true
			}
		}
	}
	for _, n := range f.Body {
		if n.Op == ir.OpGather && n.AttrInt("axis") == 0 && token(n.Args[1]) && n.Args[0].Type.Rank() == 2 {
			return n.Args[0].Type.Shape[0], true
		}
	}
	return 0, false
}

// Logits returns the model's logits output (see the package rules).
func Logits(f *ir.Func) (ir.Output, error) {
	vocab, known := Vocab(f)
	var cands []ir.Output
	for _, o := range f.Outputs {
		t := o.Value.Type
		if !t.DType.IsFloat() || t.Rank() < 2 || t.Shape[t.Rank()-1] <= 1 {
			continue
		}
		if known && t.Shape[t.Rank()-1] != vocab {
			continue
		}
		cands = append(cands, o)
	}
	switch len(cands) {
	case 1:
		return cands[0], nil
	case 0:
		if known {
			return ir.Output{}, fmt.Errorf("func @%s has no logits output (a float output [..., %d], "+
				"the vocabulary of its token embedding; outputs: %s)", f.Name, vocab, OutputList(f))
		}
		return ir.Output{}, fmt.Errorf("func @%s has no logits output (a float output [..., vocab]; "+
			"outputs: %s)", f.Name, OutputList(f))
	}
	var names []string
	for _, c := range cands {
		names = append(names, c.Name)
	}
	return ir.Output{}, fmt.Errorf("func @%s has %d outputs that could be logits (%s); keep one",
		f.Name, len(cands), strings.Join(names, ", "))
}

// Resolve says what kind means for f, without changing f.
func Resolve(f *ir.Func, kind string) (Choice, error) {
	if err := CheckKind(kind); err != nil {
		return Choice{}, err
	}
	logits := ""
	if o, err := Logits(f); err == nil {
		logits = o.Name
	}
	switch kind {
	case None:
		return Choice{Kind: None, Logits: logits}, nil
	case Model:
		l, err := ModelLoss(f)
		if err != nil {
			return Choice{}, fmt.Errorf("--loss=model: %w", err)
		}
		return Choice{Kind: Model, Loss: l, Logits: logits}, nil
	case CrossEntropy:
		if _, err := Logits(f); err != nil {
			return Choice{}, fmt.Errorf("--loss=cross-entropy: %w", err)
		}
		if f.Output(Output) != nil {
			return Choice{}, fmt.Errorf("--loss=cross-entropy: func @%s already has an output named %q",
				f.Name, Output)
		}
		return Choice{Kind: CrossEntropy, Loss: Output, Logits: logits}, nil
	}
	// auto
	if l, ambiguous, err := modelLoss(f); err == nil {
		return Choice{Kind: Model, Loss: l, Logits: logits}, nil
	} else if ambiguous {
		return Choice{}, fmt.Errorf("--loss=auto: %w; pass --loss=cross-entropy or keep one", err)
	}
	if _, embeds := Vocab(f); logits != "" && embeds && f.Output(Output) == nil {
		return Choice{Kind: CrossEntropy, Loss: Output, Logits: logits}, nil
	}
	return Choice{Kind: None, Logits: logits}, nil
}

// Apply resolves kind for f and makes it so, in place: cross-entropy is added
// when chosen, and a training step keeps only its loss output unless keepOutputs.
func Apply(f *ir.Func, kind string, keepOutputs bool) (Choice, error) {
	c, err := Resolve(f, kind)
	if err != nil {
		return c, err
	}
	if c.Kind == CrossEntropy {
		if err := AddCrossEntropy(f, c.Logits); err != nil {
			return c, err
		}
	}
	if c.Loss != "" && !keepOutputs {
		var outs []ir.Output
		for _, o := range f.Outputs {
			if o.Name == c.Loss {
				outs = append(outs, o)
			}
		}
		f.Outputs = outs
	}
	return c, nil
}

// AddCrossEntropy appends Output = mean softmax_cross_entropy(logits [N, V],
// labels [N]) ignoring IgnoreIndex, in f32. labels is the parameter Labels,
// created (i64, the logits' shape without the vocabulary dim, labelled like the
// token input) unless the model has one of that many elements already.
func AddCrossEntropy(f *ir.Func, logitsName string) error {
	lv := f.Output(logitsName)
	if lv == nil {
		return fmt.Errorf("func @%s: no logits output %q", f.Name, logitsName)
	}
	if f.Output(Output) != nil {
		return fmt.Errorf("func @%s already has an output named %q", f.Name, Output)
	}
	lt := lv.Type
	vocab := lt.Shape[lt.Rank()-1]
	rows := lt.Numel() / vocab
	b := ir.Edit(f)
	b.SetName("lcc.cross_entropy")
	var labels *ir.Value
	if p := f.Param(Labels); p != nil {
		if p.Role == ir.RoleWeight || p.Role == ir.RoleState || !p.Value.Type.DType.IsInt() ||
			p.Value.Type.Numel() != rows {
			return fmt.Errorf("func @%s: parameter %q is %v, which cannot label logits %v", f.Name,
				Labels, p.Value.Type, lt)
		}
		labels = p.Value
	} else {
		labels = b.Label(Labels, labelType(f, lt.Shape[:lt.Rank()-1]))
	}
	x := lv
	if lt.Rank() != 2 {
		x = b.Reshape(x, rows, vocab)
	}
	y := labels
	if labels.Type.Rank() != 1 {
		y = b.Reshape(y, rows)
	}
	l := b.Apply1(ir.OpSoftmaxCrossEntropy, ir.A("ignore_index", int64(IgnoreIndex), "reduction", "mean"), x, y)
	if l != nil && l.Type.DType != tensor.F32 {
		l = b.Cast(l, tensor.F32)
	}
	b.Output(Output, l)
	if err := b.Err(); err != nil {
		return err
	}
	return ir.Verify(f)
}

// labelType is i64 of shape, labelled like the token input when it has that
// shape, so the printed IR reads i64[batch=8,seq=64].
func labelType(f *ir.Func, shape []int64) ir.Type {
	t := ir.T(tensor.I64, shape...)
	for _, p := range f.Params {
		if p.Role == ir.RoleInput && p.Value.Type.SameShape(t) && p.Value.Type.Labels != nil {
			t.Labels = append([]string{}, p.Value.Type.Labels...)
			break
		}
	}
	return t
}

// Insert is the insert-loss pass: Apply(f, kind, keepOutputs), the choice left
// in *res when res is not nil.
func Insert(kind string, keepOutputs bool, res *Choice) passes.Pass {
	if kind == "" {
		kind = Auto
	}
	return passes.Pass{Name: "insert-loss", Doc: "choose the loss output (--loss) or add cross-entropy of the logits",
		Config: "loss=" + kind + map[bool]string{true: " keep-outputs=true"}[keepOutputs],
		Run: func(f *ir.Func) error {
			c, err := Apply(f, kind, keepOutputs)
			if res != nil {
				*res = c
			}
			return err
		}}
}

var _ = passes.RegisterConfigurable(Insert(Auto, false, nil), func(a *passes.Args) (passes.Pass, error) {
	kind := a.String("loss", Auto)
	if err := CheckKind(kind); err != nil {
		return passes.Pass{}, err
	}
	return Insert(kind, a.Bool("keep-outputs", false), nil), nil
})

// OutputList names f's outputs and their types, for messages that ask for one.
func OutputList(f *ir.Func) string {
	var s []string
	for _, o := range f.Outputs {
		s = append(s, fmt.Sprintf("%s: %v", o.Name, o.Value.Type))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
