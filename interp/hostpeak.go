package interp

import (
	"math"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// HostPeak estimates the host memory a Run of f holds at its peak, in bytes, and
// the node where the peak is reached (nil when it is the parameters alone). It
// follows run's liveness: every parameter for the whole run (its caller holds it),
// and at each node the values still to be read, the node's arguments and its
// results, at tensor.HostElemBytes an element. A result sharing its argument's
// storage (a reshape's) counts twice and a kernel's scratch not at all; the first
// errs on the safe side, the second is at most one operand's worth (matmul's
// transposed copy). Sums saturate at MaxInt64, so a type of 2^56 elements reads
// as too large, never as negative.
//
// Callers compare it with the host's memory before a run (driver.HostBudget), so
// that a graph too large for the host is refused before its first allocation.
func HostPeak(f *ir.Func) (bytes int64, at *ir.Node) {
	var live int64
	for _, p := range f.Params {
		live = addSat(live, hostBytes(p.Value))
	}
	peak := live
	last, keep := liveness(f)
	for _, p := range f.Params {
		keep[p.Value] = true // the caller's: never freed by the run
	}
	held := map[*ir.Value]bool{}
	drop := func(v *ir.Value) {
		if held[v] && !keep[v] && live < math.MaxInt64 { // once saturated, it stays so
			live -= hostBytes(v)
		}
		delete(held, v)
	}
	for i, n := range f.Body {
		for _, r := range n.Results {
			live, held[r] = addSat(live, hostBytes(r)), true
		}
		if live > peak {
			peak, at = live, n
		}
		for _, r := range n.Results {
			if _, read := last[r]; !read {
				drop(r)
			}
		}
		for _, a := range n.Args {
			if last[a] == i {
				drop(a)
			}
		}
	}
	return peak, at
}

// hostBytes is v's size in a host tensor, past tensor.MaxElements too (exec
// refuses such a value by itself), saturating.
func hostBytes(v *ir.Value) int64 {
	n, err := ir.ShapeNumel(v.Type.Shape)
	if err != nil || n > math.MaxInt64/tensor.HostElemBytes {
		return math.MaxInt64
	}
	return n * tensor.HostElemBytes
}

// addSat is a + b for non-negative a and b, at most MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
