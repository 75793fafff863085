package flash

import (
	"fmt"
	"math/rand/v2"
	"testing"

	fk "github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/ir"
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
				desc := fk.Desc{B: int64(c.b), T: int64(c.t), S: int64(c.t), Hq: c.hq, Hkv: c.hk, D: c.d,
					Causal: true, Window: c.window, Docs: c.docs != nil, DQ: vr.mode, Tier: vr.tier}
				checkStarts(t, d, cache, rng, desc, starts, docStarts)
			})
		}
	}
}
