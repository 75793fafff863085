package interp

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// naiveMatMul is c[i,j] = Σ_k a[i,k]·b[k,j] for row-major a (m×k), b (k×n).
func naiveMatMul(a, b []float64, m, k, n int) []float64 {
	c := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			for p := 0; p < k; p++ {
				c[i*n+j] += a[i*k+p] * b[p*n+j]
			}
		}
	}
	return c
}

func transpose2(x []float64, r, c int) []float64 {
	out := make([]float64, len(x))
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			out[j*r+i] = x[i*c+j]
		}
	}
	return out
}

func TestMatMul(t *testing.T) {
	a := f64(sh(2, 3), 1, 2, 3, 4, 5, 6)
	b := f64(sh(3, 2), 7, 8, 9, 10, 11, 12)
	wantF(t, "2d", eval1(t, ir.OpMatMul, nil, a, b), sh(2, 2), 0, 58, 64, 139, 154)
	wantF(t, "transpose_a", eval1(t, ir.OpMatMul, ir.A("transpose_a", true), b, b), sh(2, 2), 0,
		7*7+9*9+11*11, 7*8+9*10+11*12, 8*7+10*9+12*11, 8*8+10*10+12*12)
	wantF(t, "transpose_b", eval1(t, ir.OpMatMul, ir.A("transpose_b", true), a, a), sh(2, 2), 0, 14, 32, 32, 77)
	// Broadcast batch dims: a [2,1,2,3] with b [3,3,2] gives [2,3,2,2].
	const m, k, n = 2, 3, 2
	av := randF(1, 2*m*k)
	bv := randF(2, 3*k*n)
	got := eval1(t, ir.OpMatMul, nil, f64(sh(2, 1, m, k), av...), f64(sh(3, k, n), bv...))
	var want []float64
	for i := 0; i < 2; i++ {
		for j := 0; j < 3; j++ {
			want = append(want, naiveMatMul(av[i*m*k:(i+1)*m*k], bv[j*k*n:(j+1)*k*n], m, k, n)...)
		}
	}
	wantF(t, "broadcast batch", got, sh(2, 3, m, n), 1e-14, want...)
	// Both transposes with a shared b: x [4,2,3]ᵀ... folded per batch.
	x := randF(3, 4*k*m)
	w := randF(4, n*k)
	got = eval1(t, ir.OpMatMul, ir.A("transpose_a", true, "transpose_b", true),
		f64(sh(4, k, m), x...), f64(sh(n, k), w...))
	want = nil
	for i := 0; i < 4; i++ {
		want = append(want, naiveMatMul(transpose2(x[i*k*m:(i+1)*k*m], k, m), transpose2(w, n, k), m, k, n)...)
	}
	wantF(t, "both transposes", got, sh(4, m, n), 1e-14, want...)
	// The folded x·W path: [2,2,3]·[3,2].
	got = eval1(t, ir.OpMatMul, nil, f64(sh(2, 2, 3), 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6), b)
	wantF(t, "folded", got, sh(2, 2, 2), 0, 58, 64, 139, 154, 58, 64, 139, 154)
	// Row chunks of a transposed a, large enough to run in parallel tasks.
	const bm, bk, bn = 130, 70, 90
	ta := randF(7, bk*bm)
	tbv := randF(8, bk*bn)
	got = eval1(t, ir.OpMatMul, ir.A("transpose_a", true), f64(sh(bk, bm), ta...), f64(sh(bk, bn), tbv...))
	wantF(t, "chunked transpose_a", got, sh(bm, bn), 1e-13, naiveMatMul(transpose2(ta, bk, bm), tbv, bm, bk, bn)...)
	got = eval1(t, ir.OpMatMul, ir.A("transpose_b", true), f64(sh(1, bm, bk), transpose2(ta, bk, bm)...),
		f64(sh(1, bn, bk), transpose2(tbv, bk, bn)...))
	wantF(t, "chunked transpose_b", got, sh(1, bm, bn), 1e-13, naiveMatMul(transpose2(ta, bk, bm), tbv, bm, bk, bn)...)
	// Empty inner dim gives zeros.
	wantF(t, "k=0", eval1(t, ir.OpMatMul, nil, f64(sh(2, 0)), f64(sh(0, 2))), sh(2, 2), 0, 0, 0, 0, 0)
}

// TestMatMulDeterministic runs a batched matmul large enough to use goroutines
// several times and requires identical bits.
func TestMatMulDeterministic(t *testing.T) {
	a := f32(sh(8, 64, 48), randF(5, 8*64*48)...)
	b := f32(sh(8, 48, 64), randF(6, 8*48*64)...)
	first := eval1(t, ir.OpMatMul, nil, a, b)
	for range 3 {
		if !tensor.Equal(first, eval1(t, ir.OpMatMul, nil, a, b)) {
			t.Fatal("batched matmul is not deterministic")
		}
	}
}

// BenchmarkMatMul512x64x512 is the shape of a tiny GPT's projections: [512,64]·[64,512].
func BenchmarkMatMul512x64x512(b *testing.B) {
	x := f32(sh(512, 64), randF(1, 512*64)...)
	w := f32(sh(64, 512), randF(2, 64*512)...)
	n := &ir.Node{Op: ir.OpMatMul}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EvalNode(n, []*tensor.Tensor{x, w}, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*512*64*512*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
