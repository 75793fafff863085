package attention

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// Dims are the sizes of one attention call: batch B, query length T, key length S,
// query heads Hq, key/value heads Hkv (Hq must be a multiple of Hkv) and head size D.
type Dims struct{ B, T, S, Hq, Hkv, D int }

// Validate reports whether d describes a legal call: no negative size, Hkv ≥ 1 and
// Hq a multiple of Hkv.
func (d Dims) Validate() error {
	if d.B < 0 || d.T < 0 || d.S < 0 || d.Hq < 0 || d.Hkv < 0 || d.D < 0 {
		return fmt.Errorf("attention: negative size in %+v", d)
	}
	if d.Hkv == 0 || d.Hq%d.Hkv != 0 {
		return fmt.Errorf("attention: Hq=%d must be a multiple of Hkv=%d ≥ 1", d.Hq, d.Hkv)
	}
	return nil
}

// group is the number of query heads that share one kv head.
func (d Dims) group() int { return d.Hq / d.Hkv }

// qAt is the offset of row (b, t, h) in q, o, dq and do.
func (d Dims) qAt(b, t, h int) int { return ((b*d.T+t)*d.Hq + h) * d.D }

// lseAt is the offset of (b, h, t) in lse.
func (d Dims) lseAt(b, h, t int) int { return (b*d.Hq+h)*d.T + t }

// head returns the view of kv head hk of batch b in k, v (and dk, dv when non-nil).
func (d Dims) head(b, hk int, k, v, dk, dv []float64) kvHead {
	return kvHead{k: k, v: v, dk: dk, dv: dv,
		base: b*d.S*d.Hkv*d.D + hk*d.D, stride: d.Hkv * d.D, d: d.D}
}

// mustMatch panics unless the tensors have the lengths d implies; names and
// slices alternate: "q", q, "k", k, ...
func (d Dims) mustMatch(fn string, args ...any) {
	if err := d.Validate(); err != nil {
		panic(fmt.Sprintf("lcc: BUG: %s: %v", fn, err))
	}
	nq, nk, nl := d.B*d.T*d.Hq*d.D, d.B*d.S*d.Hkv*d.D, d.B*d.Hq*d.T
	for i := 0; i < len(args); i += 2 {
		name, x := args[i].(string), args[i+1].([]float64)
		want := nq
		switch name {
		case "k", "v":
			want = nk
		case "lse", "lseB":
			want = nl
		}
		if len(x) != want {
			panic(fmt.Sprintf("lcc: BUG: %s: len(%s) = %d, want %d for %+v",
				fn, name, len(x), want, d))
		}
	}
}

// parallelFor runs body(0..n-1) on up to GOMAXPROCS goroutines. Callers give each
// index disjoint outputs, so the result does not depend on scheduling.
func parallelFor(n int, body func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			body(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				body(i)
			}
		})
	}
	wg.Wait()
}

// negInf is the lse of a row that sees no key.
var negInf = math.Inf(-1)
