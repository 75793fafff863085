package interp

import (
	"runtime"
	"sync"
	"sync/atomic"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func init() { Register(ir.OpMatMul, kernelMatMul) }

const (
	// rowChunk is how many result rows one task computes: a multiple of gonum's
	// 64-wide blocks, small enough that the thin GEMMs of a backward pass
	// (xᵀ·dy, 64×64 results with long k) still spread over cores.
	rowChunk = 64
	// serialWork is the multiply-add count below which goroutines cost more than
	// they save.
	serialWork = 1 << 17
	// minChunk is the fewest rows a task gets when thin results are cut finer.
	minChunk = 16
)

// kernelMatMul is a batched matmul with numpy-broadcast batch dims and optional
// transposes of the last two dims, computed with blas64.Gemm. When b has no batch
// (x·W, the common case) the batch folds into the rows of one GEMM. The work is
// cut into tasks of rowChunk result rows of one batch element; each task owns its
// rows of the result and Gemm sums over k in the same order however the rows are
// cut, so results are bit-for-bit independent of scheduling and core count.
func kernelMatMul(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	a, b, out := args[0], args[1], newResult(n, 0)
	// The stored shapes (ar×ac, br×bc) address the operands; m, n, k are the
	// product's, after the transposes. Gemm reads transposed operands in place,
	// so a transpose never costs a copy.
	ta, tb := n.AttrBool("transpose_a"), n.AttrBool("transpose_b")
	ra, rb := len(a.Shape), len(b.Shape)
	g := gemmShape{ar: int(a.Shape[ra-2]), ac: int(a.Shape[ra-1]),
		br: int(b.Shape[rb-2]), bc: int(b.Shape[rb-1]), ta: ta, tb: tb}
	g.m, g.k = g.ar, g.ac
	if ta {
		g.m, g.k = g.ac, g.ar
	}
	g.n = g.bc
	if tb {
		g.n = g.br
	}
	batch := out.Shape[:len(out.Shape)-2]
	nb := prod(batch)
	if g.m == 0 || g.n == 0 || g.k == 0 || nb == 0 {
		return one(out), nil // empty, or all zeros when k = 0
	}
	var aOff, bOff []int
	// Folding is only valid when a's batch rows are contiguous rows of one
	// matrix: not when a is transposed (its rows are then columns).
	if !ta && prod(b.Shape[:rb-2]) == 1 && prod(a.Shape[:ra-2]) == nb {
		// x·W with a shared W: one tall GEMM over every batch row.
		g.m *= nb
		g.ar = g.m
		nb = 1
		aOff, bOff = []int{0}, []int{0}
	} else {
		aOff = batchOffsets(a.Shape[:ra-2], batch, g.ar*g.ac)
		bOff = batchOffsets(b.Shape[:rb-2], batch, g.br*g.bc)
	}
	workers := runtime.GOMAXPROCS(0)
	if nb*g.m*g.n*g.k < serialWork {
		workers = 1
	}
	// Rows are cut into chunks of at most 64 (one gonum block), so the cut never
	// changes how Gemm blocks a result: every element is summed in the same order
	// however the rows are cut. Thin results (the weight gradients xᵀ·dy, one
	// 64-row chunk) are cut finer so that they spread over cores.
	chunk := rowChunk
	// Halve the chunk until there are two tasks a worker, so that the last tasks
	// do not leave most cores idle; minChunk keeps each task worth its start.
	for workers > 1 && nb*((g.m+chunk-1)/chunk) < 2*workers && chunk > minChunk {
		chunk /= 2
	}
	chunks := (g.m + chunk - 1) / chunk
	tasks := nb * chunks
	run := func(t int) {
		i, r0 := t/chunks, (t%chunks)*chunk
		r1 := min(r0+chunk, g.m)
		g.rows(a.F[aOff[i]:aOff[i]+g.ar*g.ac], b.F[bOff[i]:bOff[i]+g.br*g.bc],
			out.F[i*g.m*g.n:(i+1)*g.m*g.n], r0, r1)
	}
	parallelFor(tasks, workers, run)
	return one(out), nil
}

// parallelFor runs body(0..n-1) on up to workers goroutines. A panic in a worker
// is re-raised in the caller's goroutine, where the interpreter's recover turns it
// into an error naming the node (a panic left in a worker would kill the process).
func parallelFor(n, workers int, body func(i int)) {
	workers = min(workers, n)
	if workers <= 1 {
		for i := range n {
			body(i)
		}
		return
	}
	// Tasks are handed out by an atomic counter, not split in advance: GEMMs of
	// one batch can differ in cost (the last chunk is short), and a free worker
	// takes the next task.
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var panicked any
	for range workers {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					if panicked == nil {
						panicked = r
					}
					mu.Unlock()
					next.Store(int64(n)) // stop the other workers early
				}
			}()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				body(i)
			}
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}

// gemmShape is one matrix product c (m×n) = op(a)·op(b), with a stored ar×ac and
// b stored br×bc before their transposes.
type gemmShape struct {
	ar, ac, br, bc int
	m, n, k        int
	ta, tb         bool
}

// rows computes result rows [r0, r1) of c = op(a)·op(b).
func (g gemmShape) rows(a, b, c []float64, r0, r1 int) {
	var av blas64.General
	opA, opB := blas.NoTrans, blas.NoTrans
	if g.ta {
		// op(a) rows are columns of the stored a.
		// The stored a is ar×ac; its columns [r0, r1) are a view starting at
		// element r0 with the full row stride.
		av = blas64.General{Rows: g.ar, Cols: r1 - r0, Stride: g.ac, Data: a[r0:]}
		opA = blas.Trans
	} else {
		av = blas64.General{Rows: r1 - r0, Cols: g.ac, Stride: g.ac, Data: a[r0*g.ac:]}
	}
	if g.tb {
		opB = blas.Trans
	}
	// c = 1·op(a)·op(b) + 0·c: the rows of c are overwritten, not accumulated.
	blas64.Gemm(opA, opB, 1, av,
		blas64.General{Rows: g.br, Cols: g.bc, Stride: g.bc, Data: b},
		0, blas64.General{Rows: r1 - r0, Cols: g.n, Stride: g.n, Data: c[r0*g.n : r1*g.n]})
}

// batchOffsets returns, for each element of the broadcast batch shape out, the
// offset of the matching matrix of an operand with batch shape in and matrix size sz.
func batchOffsets(in, out []int64, sz int) []int {
	offs := make([]int, prod(out))
	// No batch dims: one matrix at offset 0.
	if len(out) == 0 {
		return offs
	}
	walk(out, [][]int{bcastStrides(in, out)}, func(i int, o []int) { offs[i] = o[0] * sz })
	return offs
}
