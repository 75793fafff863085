package attention

import (
	"fmt"
	"slices"
	"testing"
)

// rowsOf copies positions [lo, hi) of batch b of x [B,T,H,D] (h·dd values a position).
func rowsOf(x []float64, t, b, lo, hi, hd int) []float64 {
	return slices.Clone(x[(b*t+lo)*hd : (b*t+hi)*hd])
}

// lseRows copies positions [lo, hi) of batch b of lse [B,H,T] into a [1,H,hi−lo].
func lseRows(lse []float64, d Dims, b, lo, hi int) []float64 {
	var out []float64
	for h := range d.Hq {
		out = append(out, lse[d.lseAt(b, h, lo):d.lseAt(b, h, hi)]...)
	}
	return out
}

// packing lays out documents of the given lengths per batch row, each row summing to T.
var packings = [][][]int{
	{{5, 1, 7, 3}, {16}},
	{{2, 9, 5}, {4, 4, 4, 4}},
}

// startsOf is the doc starts [B,T] of a packing.
func startsOf(p [][]int, t int) []int64 {
	var s []int64
	for _, row := range p {
		at := 0
		for _, n := range row {
			for range n {
				s = append(s, int64(at))
			}
			at += n
		}
		if at != t {
			panic(fmt.Sprintf("packing %v does not fill %d", row, t))
		}
	}
	return s
}

// alone runs fwd and bwd on every document of p by itself and checks that the packed
// results on its rows are the same: packing is invisible to each document.
func checkAlone(t *testing.T, d Dims, p [][]int, o, lse, dq, dk, dv []float64,
	q, k, v, do []float64, run func(sub Dims, q, k, v, do []float64) (o, lse, dq, dk, dv []float64)) {
	t.Helper()
	hq, hk := d.Hq*d.D, d.Hkv*d.D
	for b, row := range p {
		lo := 0
		for _, n := range row {
			hi := lo + n
			sub := d
			sub.B, sub.T, sub.S = 1, n, n
			so, sl, sdq, sdk, sdv := run(sub, rowsOf(q, d.T, b, lo, hi, hq), rowsOf(k, d.T, b, lo, hi, hk),
				rowsOf(v, d.T, b, lo, hi, hk), rowsOf(do, d.T, b, lo, hi, hq))
			name := fmt.Sprintf("batch %d doc [%d,%d)", b, lo, hi)
			checkClose(t, name+" o", rowsOf(o, d.T, b, lo, hi, hq), so, 1e-12)
			checkClose(t, name+" lse", lseRows(lse, d, b, lo, hi), sl, 1e-12)
			checkClose(t, name+" dq", rowsOf(dq, d.T, b, lo, hi, hq), sdq, 1e-12)
			checkClose(t, name+" dk", rowsOf(dk, d.T, b, lo, hi, hk), sdk, 1e-12)
			checkClose(t, name+" dv", rowsOf(dv, d.T, b, lo, hi, hk), sdv, 1e-12)
			lo = hi
		}
	}
}

func TestDenseDocsIsEachDocumentAlone(t *testing.T) {
	d := Dims{B: 2, T: 16, S: 16, Hq: 4, Hkv: 2, D: 3}
	for i, p := range packings {
		q, k, v, do := inputs(d, uint64(300+i))
		starts := startsOf(p, d.T)
		o, lse := DenseDocs(q, k, v, d, starts, 0, 0, 0.7, Rounding{})
		dq, dk, dv := DenseDocsBackward(q, k, v, o, lse, do, d, starts, 0, 0, 0.7, Rounding{})
		checkAlone(t, d, p, o, lse, dq, dk, dv, q, k, v, do,
			func(sub Dims, q, k, v, do []float64) (o, lse, dq, dk, dv []float64) {
				o, lse = Dense(q, k, v, sub, true, 0.7)
				dq, dk, dv = DenseBackward(q, k, v, o, lse, do, sub, true, 0.7)
				return o, lse, dq, dk, dv
			})
	}
}

func TestDilatedDocsIsEachDocumentAlone(t *testing.T) {
	d := Dims{B: 2, T: 16, S: 16, Hq: 4, Hkv: 2, D: 3}
	cfg := DilatedConfig{Branches: []Branch{{2, 1}, {4, 2}, {8, 4}}, Offsets: Paper, Causal: true}
	for i, p := range packings {
		q, k, v, do := inputs(d, uint64(400+i))
		starts := startsOf(p, d.T)
		o, lse := DilatedDocs(q, k, v, d, cfg, starts, 0.7, Rounding{})
		dq, dk, dv := DilatedDocsBackward(q, k, v, o, lse, do, d, cfg, starts, 0.7, Rounding{})
		checkAlone(t, d, p, o, lse, dq, dk, dv, q, k, v, do,
			func(sub Dims, q, k, v, do []float64) (o, lse, dq, dk, dv []float64) {
				o, lse = Dilated(q, k, v, sub, cfg, 0.7)
				dq, dk, dv = DilatedBackward(q, k, v, o, lse, do, sub, cfg, 0.7)
				return o, lse, dq, dk, dv
			})
	}
}

// A ring block decides the document mask from global positions: blocks of DenseDocs
// merged over the key blocks give the packed result.
func TestDenseDocsBlocksMerge(t *testing.T) {
	d := Dims{B: 2, T: 16, S: 16, Hq: 2, Hkv: 1, D: 3}
	p := packings[0]
	q, k, v, _ := inputs(d, 500)
	starts := startsOf(p, d.T)
	want, wantLSE := DenseDocs(q, k, v, d, starts, 0, 0, 0.7, Rounding{})
	o, lse := make([]float64, len(q)), make([]float64, len(wantLSE))
	for i := range lse {
		lse[i] = negInf
	}
	for lo := 0; lo < d.S; lo += 4 {
		bd := d
		bd.S = 4
		bo, bl := DenseDocs(q, keyBlock(k, d, lo, lo+4), keyBlock(v, d, lo, lo+4), bd, starts, 0, lo,
			0.7, Rounding{})
		MergeInto(o, lse, bo, bl, d)
	}
	checkClose(t, "o", o, want, 1e-12)
	checkClose(t, "lse", lse, wantLSE, 1e-12)
}

func TestDocStarts(t *testing.T) {
	got := DocStarts([]int64{4, 9, 0, 5, 0, 0, 7}, 0, 10)
	want := []int64{10, 10, 10, 13, 13, 15, 16}
	if !slices.Equal(got, want) {
		t.Fatalf("DocStarts = %v, want %v", got, want)
	}
}
