package cuda

import (
	"math"
	"sort"
)

// ArenaAlign is the alignment of every buffer in the arena (cuBLASLt and 16-byte
// vector loads need far less; cudaMalloc gives 256).
const ArenaAlign = 256

// PlanArena assigns every allocated buffer of plan an offset in one arena and
// returns the offsets (by buffer id; -1 for inline, alias and host buffers) and the
// arena's size. A buffer lives from the first step that writes it to the last that
// reads it; parameters, constants and outputs live throughout.
func PlanArena(plan *LaunchPlan) (offs []int64, peak int64) {
	n := len(plan.Buffers)
	first, last := lifetimes(plan)
	var ids []int
	offs = make([]int64, n)
	for _, b := range plan.Buffers {
		offs[b.ID] = -1
		// An alias is its owner's memory, an inline constant lives in the kernel's
		// source, and a host buffer in pinned host memory: none takes arena space.
		// A buffer no step touches is never allocated.
		if b.Kind != "alias" && b.Kind != "inline" && b.Kind != "host" && last[b.ID] >= 0 {
			ids = append(ids, b.ID)
		}
	}
	// Largest first; ties by id keep the plan deterministic.
	// Largest first is the classic greedy order for offset assignment (as in
	// TFLite's and XLA's heap simulators): big buffers placed early leave the
	// small ones to fill the gaps, which keeps the peak close to the live maximum.
	sort.SliceStable(ids, func(i, j int) bool {
		return plan.Buffers[ids[i]].Bytes > plan.Buffers[ids[j]].Bytes
	})
	// Each buffer goes at the lowest offset where it overlaps no buffer laid out
	// before it that is live at the same time.
	var lo layout
	for _, id := range ids {
		// Sizes round up to the alignment, so that every offset stays aligned.
		size := (plan.Buffers[id].Bytes + ArenaAlign - 1) / ArenaAlign * ArenaAlign
		f, l := first[id], last[id]
		off := lo.firstFit(size, f, l)
		offs[id] = off
		lo.insert(placed{off, off + size, f, l})
		peak = max(peak, off+size)
	}
	return offs, peak
}

// lifetimes gives every buffer of plan the first and last step that holds it
// (alias buffers count for the buffer they alias; parameters, constants and
// outputs hold from -1 to len(plan.Steps)); a buffer no step touches has last -1.
func lifetimes(plan *LaunchPlan) (first, last []int) {
	n := len(plan.Buffers)
	owner := func(id int) int {
		if plan.Buffers[id].Kind == "alias" {
			return plan.Buffers[id].AliasOf
		}
		return id
	}
	first = make([]int, n)
	last = make([]int, n)
	for i := range first {
		first[i], last[i] = math.MaxInt, -1
	}
	end := len(plan.Steps)
	// A step holds every buffer it names, read or written: a lifetime spans from
	// the first to the last step that names it.
	for i, s := range plan.Steps {
		for _, a := range s.Args {
			o := owner(a)
			first[o] = min(first[o], i)
			last[o] = max(last[o], i)
		}
	}
	for _, b := range plan.Buffers {
		// Parameters and constants are uploaded before step 0 and read again by the
		// next run: they must never share memory with a temporary.
		if b.Kind == "param" || b.Kind == "const" {
			first[b.ID], last[b.ID] = -1, end
		}
	}
	// Outputs are read back after the last step, so they live to the end; they
	// are held from the start too, as parameters are: an output's memory is the
	// run's result, never shared with a temporary.
	for _, o := range plan.Outputs {
		id := owner(o.ID)
		first[id] = min(first[id], -1)
		last[id] = end
	}
	return first, last
}

// ArenaUsage is the arena's occupancy over plan's schedule: element i is the
// bytes (aligned as PlanArena aligns them) of the buffers live during step i.
// Its maximum is at most PlanArena's size, which adds the layout's gaps.
func ArenaUsage(plan *LaunchPlan) []int64 {
	first, last := lifetimes(plan)
	// A difference array: +size where a buffer starts, −size after its last
	// step; the running sum is the occupancy. Buffers that live throughout
	// (first −1) count from step 0.
	delta := make([]int64, len(plan.Steps)+1)
	for _, b := range plan.Buffers {
		if b.Kind == "alias" || b.Kind == "inline" || b.Kind == "host" || last[b.ID] < 0 {
			continue
		}
		size := (b.Bytes + ArenaAlign - 1) / ArenaAlign * ArenaAlign
		delta[max(first[b.ID], 0)] += size
		if e := last[b.ID] + 1; e < len(delta) {
			delta[e] -= size
		}
	}
	use := make([]int64, len(plan.Steps))
	var live int64
	for i := range use {
		live += delta[i]
		use[i] = live
	}
	return use
}
