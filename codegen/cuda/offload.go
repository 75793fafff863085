package cuda

import (
	"fmt"

	"github.com/lcc-dev/lcc/ir"
)

// Activation offload (ir/ops_offload.go). An offload's result is a "host"
// buffer: pinned host memory that the executor allocates beside the arena, not
// in it (HostBytes sums them). offload lowers to a "d2h" step and prefetch to an
// "h2d" step, Args [source, destination]; the executor queues each copy on its
// copy stream after the compute stream's work so far and records its done event.
// A "wait" step (same Node and Args) joins the copy into the compute stream:
//
//   - an h2d copy's wait comes right before the first step that reads the
//     prefetched buffer, so the copy overlaps the compute from the prefetch (which
//     insert-checkpoints places ahead of the first use) to there;
//   - a d2h copy's wait comes before the next d2h or h2d step (or at the end), so
//     the copy overlaps the forward until the next offload. Naming the source in
//     the wait keeps its arena slot alive until then: the slot is reused only
//     after the copy has read it.
//
// The h2d destination's slot lives from the h2d step (every earlier user of that
// memory is done, since the copy stream waits for the compute stream's work
// queued before it) to its last reader, as any value's.

// lowerOffload emits the device→host copy of n's argument.
func lowerOffload(g *gen, n *ir.Node) error {
	for _, u := range g.uses[n.Result()] {
		if u.Op != ir.OpPrefetch {
			return fmt.Errorf("host value read by %s: only prefetch may read an offload's result", u.Where())
		}
	}
	if g.outputs[n.Result()] {
		return fmt.Errorf("an offload's result (host memory) cannot be an output")
	}
	g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "d2h", Node: g.node, Op: n.Op.String(),
		Args: []int{g.ids[n.Args[0]], g.ids[n.Result()]}})
	return nil
}

// lowerPrefetch emits the host→device copy of n's argument.
func lowerPrefetch(g *gen, n *ir.Node) error {
	g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "h2d", Node: g.node, Op: n.Op.String(),
		Args: []int{g.ids[n.Args[0]], g.ids[n.Result()]}})
	return nil
}

// HostBytes is the pinned host memory of plan's host buffers (offloaded values),
// which the executor allocates beside the arena: each buffer at its offset in
// one block (HostLayout).
func HostBytes(plan *LaunchPlan) int64 {
	_, size := HostLayout(plan)
	return size
}

// HostLayout places every host buffer of plan in one pinned block, in id order,
// each aligned as the arena aligns: the offsets by buffer id (-1 for others) and
// the block's size. Every offloaded value has its own place: they are all live
// from the forward to the backward.
func HostLayout(plan *LaunchPlan) (offs []int64, size int64) {
	offs = make([]int64, len(plan.Buffers))
	for i, b := range plan.Buffers {
		offs[i] = -1
		if b.Kind == "host" {
			offs[i] = size
			size += (b.Bytes + ArenaAlign - 1) / ArenaAlign * ArenaAlign
		}
	}
	return offs, size
}
