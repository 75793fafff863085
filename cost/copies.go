package cost

import "github.com/lcc-dev/lcc/ir"

// Copies is what a step's offload copies cost on the host link, from a timeline
// of the step: compute runs the body in order at a rate of FLOPs (each node
// takes its FLOPs over the rate, so memory-bound work counts as free and the
// compute that hides copies is never overestimated), and the one copy stream
// (runtime/exec's, docs/design.md §10) runs the d2h of each offload and the h2d
// of each prefetch in body order, each starting when both the compute before it
// and the previous copy are done. A reader of a prefetched value waits for its
// copy: that wait is the stall the copies did not hide.
type Copies struct {
	// Bytes is what crosses the link in each direction per step.
	Bytes int64 `json:"bytes"`
	// CopySeconds is the copy stream's busy time (both directions),
	// ComputeSeconds the step's compute without stalls, StallSeconds the time
	// compute waited for prefetches.
	CopySeconds    float64 `json:"copy_seconds"`
	ComputeSeconds float64 `json:"compute_seconds"`
	StallSeconds   float64 `json:"stall_seconds"`
}

// HideTolerance is the stall, as a fraction of the step's compute, below which
// the copies count as hidden: recompute costs more than a 2% wait.
const HideTolerance = 0.02

// Hidden says whether the copies hide behind compute (within HideTolerance).
func (c Copies) Hidden() bool { return c.StallSeconds <= HideTolerance*c.ComputeSeconds }

// OffloadCopies times f's offload and prefetch copies at flopsPerSec of compute
// and linkBytesPerSec per direction of the host link (both > 0).
func OffloadCopies(f *ir.Func, flopsPerSec, linkBytesPerSec float64) Copies {
	var c Copies
	var now, copyFree float64
	ready := map[*ir.Value]float64{}
	for _, n := range f.Body {
		switch n.Op {
		case ir.OpOffload, ir.OpPrefetch:
			b := n.Results[0].Type.Bytes()
			d := float64(b) / linkBytesPerSec
			start := max(now, copyFree)
			copyFree = start + d
			c.CopySeconds += d
			if n.Op == ir.OpOffload {
				c.Bytes += b
			} else {
				ready[n.Results[0]] = copyFree
			}
			continue
		}
		for _, a := range n.Args {
			if r, ok := ready[Root(a)]; ok && r > now {
				c.StallSeconds += r - now
				now = r
			}
		}
		d := float64(n.FLOPs()) / flopsPerSec
		now += d
		c.ComputeSeconds += d
	}
	return c
}
