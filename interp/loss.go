package interp

import (
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func init() {
	Register(ir.OpSoftmaxCrossEntropy, kernelLoss)
	Register(ir.OpNLLLoss, kernelLoss)
}

// kernelLoss is softmax_cross_entropy (on logits: loss = logsumexp(x) − x[label])
// or nll_loss (on log-probabilities: loss = −x[label]) over rows [N, C].
//
// A row whose label equals ignore_index contributes nothing; when the attribute is
// absent no label is ignored. reduction "mean" divides by the number of rows not
// ignored (NaN when every row is, as in PyTorch), "sum" adds, "none" returns one
// loss per row (0 for ignored rows). A label outside [0, C) that is not ignored is
// an error.
func kernelLoss(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, labels, out := args[0], args[1], newResult(n, 0)
	rows, c := int(x.Shape[0]), int(x.Shape[1])
	ignore, hasIgnore := n.Attrs.Get("ignore_index")
	// A present but nil ignore_index ignores nothing, as an absent one.
	ign, _ := ignore.(int64)
	hasIgnore = hasIgnore && ignore != nil
	losses := make([]float64, rows)
	counted := 0
	for r := 0; r < rows; r++ {
		l := labels.I[r]
		if hasIgnore && l == ign {
			continue
		}
		// The label indexes the row below: out of range is bad data, an error.
		if l < 0 || l >= int64(c) {
			return nil, fmt.Errorf("label %d of row %d out of range for %d classes", l, r, c)
		}
		row := x.F[r*c : (r+1)*c]
		if n.Op == ir.OpNLLLoss {
			losses[r] = -row[l]
		} else {
			losses[r] = logSumExp(row) - row[l]
		}
		counted++
	}
	switch n.AttrString("reduction") {
	case "none":
		copy(out.F, losses)
	case "sum":
		out.F[0] = sum(losses)
	default:
		// 0/0 is NaN when every row is ignored, PyTorch's answer too.
		out.F[0] = sum(losses) / float64(counted)
	}
	return one(out), nil
}

// logSumExp is log Σ exp(x), max-subtracted.
func logSumExp(xs []float64) float64 {
	mx := negInf
	for _, v := range xs {
		mx = fmax(mx, v)
	}
	// An all −Inf row has logsumexp −Inf (exp(−Inf − −Inf) would be NaN), and a
	// +Inf logit makes it +Inf.
	if math.IsInf(mx, 0) {
		return mx
	}
	var s float64
	for _, v := range xs {
		s += math.Exp(v - mx)
	}
	return mx + math.Log(s)
}

// sum adds xs in order: the one order every loss reduction uses.
func sum(xs []float64) float64 {
	var s float64
	for _, v := range xs {
		s += v
	}
	return s
}
