package flash

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	fk "github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/interp/attention"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// TestGPUWindow runs sliding-window attention (Desc.Window) at each tier against
// the CPU on random data with outputs poisoned first: windows smaller than a
// tile, not a multiple of any tile, wider than the sequence, grouped-query
// heads, a ragged tail, and a window over packed documents (the later start
// wins). The CPU's reference is DenseDocs with each query's first visible key,
// the form ir/window.go defines. The backward runs twice and must give the same
// bits.
func TestGPUWindow(t *testing.T) {
	d, cache := gpu(t)
	cases := []struct {
		name            string
		b, t, hq, hk, d int
		window          int64
		docs            []int // document lengths of each row, or none
	}{
		{"d128-gqa-w300", 2, 1000, 4, 2, 128, 300, nil},
		{"d64-gqa8-w17", 1, 777, 8, 1, 64, 17, nil},
		{"d128-w4096-long", 1, 5000, 2, 2, 128, 4096, nil},
		{"d64-wider-than-T", 1, 513, 2, 2, 64, 1000, nil},
		{"d128-w129-docs", 1, 1200, 4, 2, 128, 129, []int{1, 400, 64, 735}},
	}
	for i, c := range cases {
		for _, vr := range tierVariants(d, fk.DQFused) {
			t.Run(fmt.Sprintf("%s/tier%d", c.name, vr.tier), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(i), 17))
				var docStarts []int64
				starts := make([]int64, 0, c.b*c.t)
				for range c.b {
					pos, l := 0, 0
					for tt := range c.t {
						s := ir.WindowStart(int64(tt), c.window)
						if c.docs != nil {
							for tt >= pos+c.docs[l] {
								pos += c.docs[l]
								l++
							}
							docStarts = append(docStarts, int64(pos))
							s = max(s, int64(pos))
						}
						starts = append(starts, s)
					}
				}
				dims := attention.Dims{B: c.b, T: c.t, S: c.t, Hq: c.hq, Hkv: c.hk, D: c.d}
				desc := fk.Desc{B: int64(c.b), T: int64(c.t), S: int64(c.t), Hq: c.hq, Hkv: c.hk, D: c.d,
					Causal: true, Window: c.window, Docs: c.docs != nil, DQ: vr.mode, Tier: vr.tier}
				a, err := New(d, cache, desc)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				if c.docs != nil {
					sb := alloc(t, d, 2*len(docStarts), false) // int64: two words each
					if err := cuda.CopyHtoD(d, sb.p, docStarts); err != nil {
						t.Fatal(err)
					}
					a.Starts = sb.p
				}
				nq, nk, nl := c.b*c.t*c.hq*c.d, c.b*c.t*c.hk*c.d, c.b*c.hq*c.t
				q, qh := randBF16(t, d, rng, nq, 1)
				k, kh := randBF16(t, d, rng, nk, 1)
				v, vh := randBF16(t, d, rng, nk, 1)
				do, doh := randBF16(t, d, rng, nq, 1)
				o, lse := alloc(t, d, nq, true), alloc(t, d, nl, false)
				if err := a.Forward(nil, o.p, lse.p, q.p, k.p, v.p); err != nil {
					t.Fatal(err)
				}
				if err := d.Synchronize(); err != nil {
					t.Fatal(err)
				}
				scale := 1 / math.Sqrt(float64(c.d))
				wo, wl := attention.DenseDocs(qh, kh, vh, dims, starts, 0, 0, scale, attention.Rounding{})
				oh, lh := o.get(t, d), lse.get(t, d)
				if e := relErr(oh, wo); e > tol {
					t.Errorf("o: relative error %.3g > %g", e, tol)
				}
				if e := relErr(lh, wl); e > 1e-3 {
					t.Errorf("lse: relative error %.3g", e)
				}
				wdq, wdk, wdv := attention.DenseDocsBackward(qh, kh, vh, oh, lh, doh, dims, starts, 0, 0, scale,
					attention.Rounding{})
				checkBackward(t, d, a, [3][]float64{wdq, wdk, wdv}, nq, nk, nl, q, k, v, o, lse, do)
			})
		}
	}
}
