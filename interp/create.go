package interp

import (
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Ops that make a tensor from attributes alone. full and range compute in
// float64 and are rounded by the interpreter like any result, so a bf16 range
// has bf16's gaps, as in PyTorch.
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
		// Go's float-to-int conversion truncates toward zero, as PyTorch's conversions do.
		iv := tensor.WrapInt(int64(v), out.DType)
		// A bool is 1 for any non-zero value, not the value wrapped to one bit (2
		// would wrap to 0).
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
		// start + i·delta, not a running sum: no rounding error accumulates along a
		// long range, so position i is the same whatever the range's length.
		v := start + float64(i)*delta
		if out.DType.IsFloat() {
			out.F[i] = v
		} else {
			out.I[i] = tensor.WrapInt(int64(v), out.DType)
		}
	}
	return one(out), nil
}
