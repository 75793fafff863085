package cpu

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func init() { Register(ir.OpMatMul, kernelMatMul) }

// kernelMatMul is a batched matmul with numpy-broadcast batch dims and optional
// transposes of the last two dims, one blas64.Gemm per batch element. When b has no
// batch (x·W, the common case) the batch folds into the rows of a single GEMM;
// otherwise batch elements are spread over goroutines, each owning its output
// block, so results do not depend on scheduling.
func kernelMatMul(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	a, b, out := args[0], args[1], newResult(n, 0)
	ta, tb := n.Attrs.Bool("transpose_a"), n.Attrs.Bool("transpose_b")
	ra, rb := len(a.Shape), len(b.Shape)
	ar, ac := int(a.Shape[ra-2]), int(a.Shape[ra-1])
	br, bc := int(b.Shape[rb-2]), int(b.Shape[rb-1])
	m, k := ar, ac
	if ta {
		m, k = ac, ar
	}
	nn := bc
	if tb {
		nn = br
	}
	if m == 0 || nn == 0 {
		return one(out), nil
	}
	batch := out.Shape[:len(out.Shape)-2]
	nb := prod(batch)
	if k == 0 {
		return one(out), nil // out is already zero
	}
	opA, opB := blas.NoTrans, blas.NoTrans
	if ta {
		opA = blas.Trans
	}
	if tb {
		opB = blas.Trans
	}
	// x·W with a shared W: one tall GEMM over all batch rows.
	if !ta && prod(b.Shape[:rb-2]) == 1 && prod(a.Shape[:ra-2]) == nb {
		gemm(opA, opB, a.F, nb*m, k, b.F, br, bc, out.F, nb*m, nn)
		return one(out), nil
	}
	// Batch offsets of a and b under broadcasting.
	aOff, bOff := batchOffsets(a.Shape[:ra-2], batch, ar*ac), batchOffsets(b.Shape[:rb-2], batch, br*bc)
	workers := min(runtime.GOMAXPROCS(0), nb)
	// Small products are cheaper run in a row than handed to goroutines.
	if workers <= 1 || m*nn*k < 32*32*32 && nb < 64 {
		workers = 1
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := w; i < nb; i += workers {
				gemm(opA, opB, a.F[aOff[i]:aOff[i]+ar*ac], ar, ac, b.F[bOff[i]:bOff[i]+br*bc],
					br, bc, out.F[i*m*nn:(i+1)*m*nn], m, nn)
			}
		})
	}
	wg.Wait()
	return one(out), nil
}

// batchOffsets returns, for each element of the broadcast batch shape out, the
// offset of the matching matrix of an operand with batch shape in and matrix size sz.
func batchOffsets(in, out []int64, sz int) []int {
	offs := make([]int, prod(out))
	if len(out) == 0 {
		return offs
	}
	st := bcastStrides(in, out)
	walk(out, [][]int{st}, func(i int, o []int) { offs[i] = o[0] * sz })
	return offs
}

// gemm computes c (m×nn) = op(a)·op(b), with a stored as ar×ac and b as br×bc
// before their transposes.
func gemm(opA, opB blas.Transpose, a []float64, ar, ac int, b []float64, br, bc int,
	c []float64, m, nn int) {
	blas64.Gemm(opA, opB, 1,
		blas64.General{Rows: ar, Cols: ac, Stride: ac, Data: a},
		blas64.General{Rows: br, Cols: bc, Stride: bc, Data: b},
		0, blas64.General{Rows: m, Cols: nn, Stride: nn, Data: c})
}
