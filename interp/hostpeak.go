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
// results, at tensor.HostElemBytes an element, or half that for a value resting
// packed (pack.go; unpacked again, in full, while a kernel reads it). A result sharing its argument's
// storage (a reshape's) counts twice and a kernel's scratch not at all; the first
// errs on the safe side, the second is at most one operand's worth (matmul's
// transposed copy). Sums saturate at MaxInt64, so a type of 2^56 elements reads
// as too large, never as negative.
//
// Callers compare it with the host's memory before a run (driver.HostBudget), so
// that a graph too large for the host is refused before its first allocation.
func HostPeak(f *ir.Func) (bytes int64, at *ir.Node) { return hostPeak(f, true) }

// hostPeak is HostPeak, for a run that packs values at rest or one that does not.
func hostPeak(f *ir.Func, packing bool) (bytes int64, at *ir.Node) {
	var live int64
	for _, p := range f.Params {
		live = addSat(live, hostBytes(p.Value))
	}
	peak := live
	last, keep := liveness(f)
	for _, p := range f.Params {
		keep[p.Value] = true // the caller's: never freed by the run
	}
	// size[v] is what v holds while it waits for its readers: 8 bytes an element,
	// or 4 once packed (pack.go).
	size := map[*ir.Value]int64{}
	drop := func(v *ir.Value) {
		if b, ok := size[v]; ok && !keep[v] && live < math.MaxInt64 { // once saturated, it stays so
			live -= b
		}
		delete(size, v)
	}
	for i, n := range f.Body {
		// now is live plus what exists only while this node runs: the unpacked
		// copies of packed arguments and the results being written.
		now := live
		for _, a := range n.Args {
			if b, ok := size[a]; ok && b < hostBytes(a) {
				now = addSat(now, hostBytes(a)) // a packed argument is unpacked for the kernel
			}
		}
		for _, r := range n.Results {
			live, now, size[r] = addSat(live, hostBytes(r)), addSat(now, hostBytes(r)), hostBytes(r)
		}
		// The peak is taken while the node runs, before its dead results and last
		// reads are dropped: that is when run holds the most.
		if now > peak {
			peak, at = now, n
		}
		for _, r := range n.Results {
			if _, read := last[r]; !read {
				drop(r)
			} else if packing && packs(r, i, last, keep) && live < math.MaxInt64 {
				// Packed at rest: half of the 8 bytes an element, as pack stores float32.
				live -= size[r] / 2
				size[r] -= size[r] / 2
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
