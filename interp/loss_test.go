package interp

import (
	"math"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func TestLosses(t *testing.T) {
	x := f64(sh(3, 3), 1, 2, 3, 0, 0, 0, 5, 1, 1)
	lse := func(a, b, c float64) float64 { return math.Log(math.Exp(a) + math.Exp(b) + math.Exp(c)) }
	l0, l1, l2 := lse(1, 2, 3)-3, math.Log(3), lse(5, 1, 1)-1
	labels := i64(sh(3), 2, 0, 1)
	wantF(t, "none", eval1(t, ir.OpSoftmaxCrossEntropy, ir.A("reduction", "none"), x, labels), sh(3), 1e-15,
		l0, l1, l2)
	wantF(t, "mean", eval1(t, ir.OpSoftmaxCrossEntropy, nil, x, labels), sh(), 1e-15, (l0+l1+l2)/3)
	wantF(t, "sum", eval1(t, ir.OpSoftmaxCrossEntropy, ir.A("reduction", "sum"), x, labels), sh(), 1e-15, l0+l1+l2)
	// ignore_index drops rows from the sum and from the mean's count.
	ign := i64(sh(3), 2, -100, 1)
	wantF(t, "ignore mean", eval1(t, ir.OpSoftmaxCrossEntropy, ir.A("ignore_index", -100), x, ign), sh(), 1e-15,
		(l0+l2)/2)
	wantF(t, "ignore none", eval1(t, ir.OpSoftmaxCrossEntropy, ir.A("ignore_index", -100, "reduction", "none"),
		x, ign), sh(3), 1e-15, l0, 0, l2)
	// Every row ignored: mean is NaN (PyTorch), sum is 0.
	all := i64(sh(3), 7, 7, 7)
	wantF(t, "all ignored", eval1(t, ir.OpSoftmaxCrossEntropy, ir.A("ignore_index", 7), x, all), sh(), 0, math.NaN())
	wantF(t, "all ignored sum", eval1(t, ir.OpNLLLoss, ir.A("ignore_index", 7, "reduction", "sum"), x, all), sh(), 0, 0)
	// Without ignore_index, -100 is an ordinary (out of range) label.
	_, err := EvalNode(&ir.Node{Op: ir.OpSoftmaxCrossEntropy, Name: "ce"}, []*tensor.Tensor{x, ign}, Options{})
	if err == nil || !strings.Contains(err.Error(), "label -100 of row 1 out of range") {
		t.Errorf("err = %v", err)
	}
	// nll_loss on log-probabilities agrees with cross-entropy on logits.
	lp := eval1(t, ir.OpLogSoftmax, ir.A("axis", -1), x)
	wantF(t, "nll", eval1(t, ir.OpNLLLoss, ir.A("ignore_index", -100), lp, ign), sh(), 1e-15, (l0+l2)/2)
}
