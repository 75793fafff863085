package interp

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

// TestParallelRange checks that the ranges cover [0, n) once each and that a panic
// in a worker reaches the caller.
func TestParallelRange(t *testing.T) {
	for _, n := range []int{0, 1, 7, grain, 5*grain + 3} {
		seen := make([]int32, n)
		parallelRange(n, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("n=%d: element %d visited %d times", n, i, c)
			}
		}
	}
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want boom", r)
		}
	}()
	parallelRange(4*grain, 1, func(lo, hi int) {
		if lo > 0 {
			panic("boom")
		}
	})
}

// TestFastScalarsMatchMath checks fmax, fmin and roundF32 bit for bit against
// math.Max, math.Min and roundFloats, on special and random values.
func TestFastScalarsMatchMath(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(),
		math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-310, 3.4028235677973366e38}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		vals = append(vals, math.Float64frombits(r.Uint64()), r.NormFloat64())
	}
	bits := math.Float64bits
	for _, a := range vals {
		for _, b := range vals[:40] {
			wantMax, wantMin := math.Max(a, b), math.Min(a, b)
			if a != a || b != b {
				wantMax, wantMin = math.NaN(), math.NaN()
			}
			if got := fmax(a, b); bits(got) != bits(wantMax) {
				t.Fatalf("fmax(%v, %v) = %v, want %v", a, b, got, wantMax)
			}
			if got := fmin(a, b); bits(got) != bits(wantMin) {
				t.Fatalf("fmin(%v, %v) = %v, want %v", a, b, got, wantMin)
			}
		}
	}
	want := append([]float64{}, vals...)
	roundFloats(want, tensor.F32)
	got := append([]float64{}, vals...)
	roundF32(got)
	for i := range got {
		if bits(got[i]) != bits(want[i]) {
			t.Fatalf("roundF32(%v) = %v, want %v", vals[i], got[i], want[i])
		}
	}
}
