package interp

import (
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func init() {
	registerMove(ir.OpConstant, kernelConstant)
	Register(ir.OpFull, kernelFull)
	Register(ir.OpRange, kernelRange)
}

// kernelConstant returns the value attribute itself (results are read-only), or a
// rounded copy when it holds values its dtype cannot.
func kernelConstant(n *ir.Node, _ []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	return one(roundedInput(n.AttrTensor("value"), opts)), nil
}

// kernelFull fills the result with value (truncated for integers, x ≠ 0 for bool).
func kernelFull(n *ir.Node, _ []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	out := newResult(n, 0)
	v := n.AttrFloat("value")
	if out.DType.IsFloat() {
		fill(out.F, v)
	} else {
		iv := tensor.WrapInt(int64(v), out.DType)
		if out.DType == tensor.Bool && v != 0 {
			iv = 1
		}
		for i := range out.I {
			out.I[i] = iv
		}
	}
	return one(out), nil
}

// kernelRange is start + i·delta for i < count, computed in float64 (integers
// truncate toward zero).
func kernelRange(n *ir.Node, _ []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	out := newResult(n, 0)
	start, delta := n.AttrFloat("start"), n.AttrFloat("delta")
	for i := range out.Numel() {
		v := start + float64(i)*delta
		if out.DType.IsFloat() {
			out.F[i] = v
		} else {
			out.I[i] = tensor.WrapInt(int64(v), out.DType)
		}
	}
	return one(out), nil
}
