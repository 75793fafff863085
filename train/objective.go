package train

import (
	"fmt"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
)

// Objective kinds accepted by BuildObjective (the --loss flag).
const (
	// LossAuto uses the model's own scalar loss output if it has one, else
	// cross-entropy on its logits.
	LossAuto = "auto"
	// LossModel requires the model to compute its loss (a scalar float output).
	LossModel = "model"
	// LossCrossEntropy adds mean next-token cross-entropy on the logits output.
	LossCrossEntropy = "cross-entropy"
)

// Names of what BuildObjective adds.
const (
	LabelsParam = "labels"
	LossOutput  = "loss"
)

// BuildObjective returns a function computing a scalar training objective from
// f, and the name of the output holding it. f is not modified.
//
// With kind "" or LossAuto, a model that computes its loss (a scalar float output;
// one named like "loss" wins if there are several) is used as is. Otherwise, or
// with LossCrossEntropy, the logits output (the single float output of rank >= 2
// whose last dim is the vocabulary) gets a label parameter "labels" (i64, the
// logits' shape without the last dim) and the output "loss" =
// mean softmax_cross_entropy(logits [N, V], labels [N]) ignoring label −100.
func BuildObjective(f *ir.Func, kind string) (*ir.Func, string, error) {
	switch kind {
	case "", LossAuto:
		if name, ok := scalarLoss(f); ok {
			return f.Clone(), name, nil
		}
		g, err := crossEntropy(f)
		if err != nil {
			return nil, "", fmt.Errorf("func @%s has no scalar loss output, and %w", f.Name, err)
		}
		return g, LossOutput, nil
	case LossModel:
		if name, ok := scalarLoss(f); ok {
			return f.Clone(), name, nil
		}
		return nil, "", fmt.Errorf("--loss model: func @%s has no scalar float output (outputs: %s)",
			f.Name, outputList(f))
	case LossCrossEntropy:
		g, err := crossEntropy(f)
		if err != nil {
			return nil, "", fmt.Errorf("--loss cross-entropy: %w", err)
		}
		return g, LossOutput, nil
	}
	return nil, "", fmt.Errorf("--loss %q: want %s, %s or %s", kind, LossAuto, LossCrossEntropy,
		LossModel)
}

// scalarLoss finds the output a model computes its loss in.
func scalarLoss(f *ir.Func) (string, bool) {
	var found []string
	for _, o := range f.Outputs {
		if t := o.Value.Type; t.Rank() == 0 && t.DType.IsFloat() {
			found = append(found, o.Name)
		}
	}
	for _, n := range found {
		if strings.Contains(strings.ToLower(n), "loss") {
			return n, true
		}
	}
	if len(found) > 0 {
		return found[0], true
	}
	return "", false
}

// Logits returns the output holding f's logits: the single float output of rank
// at least 2 whose last dim is larger than 1 (the vocabulary).
func Logits(f *ir.Func) (ir.Output, error) {
	var cands []ir.Output
	for _, o := range f.Outputs {
		if t := o.Value.Type; t.DType.IsFloat() && t.Rank() >= 2 && t.Shape[t.Rank()-1] > 1 {
			cands = append(cands, o)
		}
	}
	switch len(cands) {
	case 1:
		return cands[0], nil
	case 0:
		return ir.Output{}, fmt.Errorf("func @%s has no logits output (a float output [..., vocab]; "+
			"outputs: %s)", f.Name, outputList(f))
	}
	return ir.Output{}, fmt.Errorf("func @%s has %d outputs that could be logits (%s); keep one",
		f.Name, len(cands), outputList(f))
}

// Vocab returns the vocabulary size token ids must stay below: the last dim of
// the logits, or else the rows of the embedding table a token parameter indexes
// (an input, or a label: testdata's gpt_mini_loss.onnx embeds its labels).
func Vocab(f *ir.Func) (int64, error) {
	if o, err := Logits(f); err == nil {
		t := o.Value.Type
		return t.Shape[t.Rank()-1], nil
	}
	for _, n := range f.Body {
		if n.Op == ir.OpGather && n.Attrs.Int("axis", 0) == 0 && n.Args[1].Param != nil &&
			(n.Args[1].Param.Role == ir.RoleInput || n.Args[1].Param.Role == ir.RoleLabel) {
			return n.Args[0].Type.Shape[0], nil
		}
	}
	return 0, fmt.Errorf("func @%s: cannot tell its vocabulary (no logits output and no embedding "+
		"gather of a token input)", f.Name)
}

func crossEntropy(f *ir.Func) (*ir.Func, error) {
	if f.Param(LabelsParam) != nil {
		return nil, fmt.Errorf("func @%s already has a parameter %q", f.Name, LabelsParam)
	}
	g := f.Clone()
	lo, err := Logits(g)
	if err != nil {
		return nil, err
	}
	lt := lo.Value.Type
	vocab := lt.Shape[lt.Rank()-1]
	lshape := lt.Shape[:lt.Rank()-1]
	b := ir.Edit(g)
	b.SetName("objective")
	labels := b.Label(LabelsParam, labelType(g, lshape))
	n := lt.Numel() / vocab
	logits := lo.Value
	if lt.Rank() != 2 {
		logits = b.Reshape(logits, n, vocab)
	}
	flat := labels
	if len(lshape) != 1 {
		flat = b.Reshape(labels, n)
	}
	loss := b.Apply1(ir.OpSoftmaxCrossEntropy,
		ir.A("ignore_index", int64(data.IgnoreIndex), "reduction", "mean"), logits, flat)
	if loss.Type.DType != tensor.F32 && loss.Type.DType.IsFloat() {
		loss = b.Cast(loss, tensor.F32)
	}
	b.Output(LossOutput, loss)
	return b.Build()
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

func outputList(f *ir.Func) string {
	var s []string
	for _, o := range f.Outputs {
		s = append(s, fmt.Sprintf("%s: %v", o.Name, o.Value.Type))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
