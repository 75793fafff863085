package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestReshapeStrides checks reshapeStrides against the elements themselves: a
// strided view (a permutation and a slice of a row-major buffer) reshaped to a
// random factorisation must address, in row-major order, the same elements as
// the view does, whenever reshapeStrides says the reshape is a view; and a
// contiguous view must always reshape.
func TestReshapeStrides(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	factor := func(n int64) []int64 { // a random shape with n elements
		var s []int64
		for n > 1 {
			d := min(int64(2+rng.IntN(3)), n)
			for n%d != 0 {
				d++
			}
			s = append(s, d)
			n /= d
			if rng.IntN(4) == 0 {
				s = append(s, 1)
			}
		}
		return s
	}
	addrs := func(shape, st []int64, off int64) []int64 {
		var out []int64
		c := make([]int64, len(shape))
		for range prod(shape) {
			a := off
			for d := range c {
				a += c[d] * st[d]
			}
			out = append(out, a)
			for d := len(c) - 1; d >= 0; d-- {
				if c[d]++; c[d] < shape[d] {
					break
				}
				c[d] = 0
			}
		}
		return out
	}
	views, contiguous := 0, 0
	for range 2000 {
		shape := factor([]int64{24, 36, 60, 64, 96}[rng.IntN(5)])
		st := stridesOf(shape)
		perm := rng.Perm(len(shape))
		if rng.IntN(2) == 0 {
			perm = nil // keep it contiguous
		}
		pshape, pst := slices.Clone(shape), slices.Clone(st)
		for i, p := range perm {
			pshape[i], pst[i] = shape[p], st[p]
		}
		want := addrs(pshape, pst, 5)
		to := factor(prod(pshape))
		got, ok := reshapeStrides(pshape, pst, to)
		if perm == nil && !ok {
			t.Fatalf("contiguous %v -> %v: not a view", pshape, to)
		}
		if !ok {
			continue
		}
		views++
		if perm == nil {
			contiguous++
		}
		if a := addrs(to, got, 5); !slices.Equal(a, want) {
			t.Fatalf("%v strides %v -> %v strides %v: addresses %v, want %v", pshape, pst, to, got, a[:8], want[:8])
		}
	}
	if views == contiguous {
		t.Errorf("no permuted view reshaped (%d views)", views)
	}
}
