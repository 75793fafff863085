package passes

import (
	"sort"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/ir"
)

// Offloading checkpoints to pinned host memory (the "+offload" policies of
// Checkpoint; ir/ops_offload.go). After a policy has chosen the forward values
// the backward keeps, each of them (but the one the backward reads first, which
// would come straight back) is copied to the host right after the node that
// first reads it in the forward (or makes it), and copied back into the
// backward ahead of its first reader: every
// backward read goes to the copy, so the device slot of the original is free
// once its forward readers are done and the copy has read it, and the copy's
// slot lives from the prefetch to its last reader. The values are the same, so
// gradients are bitwise unchanged (the CPU interpreter runs both ops as the
// identity).
//
// Where a prefetch goes: kept values are needed in the backward in an order;
// the window of value v runs from the first backward read of the value needed
// before it (or the backward's start) to v's own first read. The prefetch goes
// right after the node of the window where the simulated live bytes (plan.
// LiveBytes) peak, the latest such node: the copied slot then misses the
// window's peak, and the compute after the peak (for a layer, the rest of its
// backward, attention's included) hides the copy.

// offloadPolicy is the suffix that adds offload to a policy ("layers+offload").
const offloadPolicy = "+offload"

// Partial offload (auto's choice, issue #26): "memory that HBM can hold stays
// in HBM". Of the kept values, those the backward needs last (the first layers'
// inputs) are offloaded first: they wait on the device longest, across the
// backward's peak, and their copies back have the most compute to hide behind.
// offloadAll offloads every candidate (the explicit "+offload" policies).
const offloadAll = -1

// offloadKept rewrites g, a forward followed by its backward from start, to
// offload the last n (offloadAll: every one) of the non-constant forward values
// the backward reads, in the order it first reads them, but the first needed,
// and prefetch them back. It returns the number of values offloaded and the
// number of candidates there were.
func offloadKept(g *ir.Func, start, n int) (offloaded, candidates int) {
	pos := make(map[*ir.Node]int, len(g.Body))
	for i, n := range g.Body {
		pos[n] = i
	}
	first := map[*ir.Value]int{} // kept value → index of its first backward reader
	var kept []*ir.Value
	outputs := g.OutputSet()
	for i, n := range g.Body[start:] {
		for _, a := range n.Args {
			d := a.Def
			if d == nil || pos[d] >= start || isConstant(d.Op) || d.Op == ir.OpReshape || outputs[a] {
				continue // parameters, backward values, constants, views, outputs (live anyway)
			}
			if _, ok := first[a]; !ok {
				first[a] = start + i
				kept = append(kept, a)
			}
		}
	}
	if len(kept) < 2 {
		return 0, 0
	}
	sort.SliceStable(kept, func(i, j int) bool { return first[kept[i]] < first[kept[j]] })
	from := 1 // kept[from:] are offloaded
	if n >= 0 && n < len(kept)-1 {
		from = len(kept) - n
	}
	live := cost.LiveBytes(g)
	// The first forward reader of each kept value: its offload goes after it, so
	// that a kernel which fuses the value's producer into its reader (a residual
	// add into the next norm: codegen/cuda/residual.go) still may.
	reader := map[*ir.Value]*ir.Node{}
	for _, n := range g.Body[:start] {
		for _, a := range n.Args {
			if _, ok := first[a]; ok && reader[a] == nil {
				reader[a] = n
			}
		}
	}
	// at[i] lists the prefetches to insert after body node i; after[n] the
	// offloads to insert after node n.
	at := map[int][]*ir.Node{}
	after := map[*ir.Node][]*ir.Node{}
	pre := map[*ir.Value]*ir.Value{}
	for k := from; k < len(kept); k++ {
		v := kept[k]
		off := &ir.Node{Op: ir.OpOffload, Args: []*ir.Value{v}, Name: v.Def.Name + "/offload"}
		h := &ir.Value{Type: v.Type, Def: off}
		off.Results = []*ir.Value{h}
		if r := reader[v]; r != nil {
			after[r] = append(after[r], off)
		} else {
			after[v.Def] = append(after[v.Def], off)
		}
		// The latest peak of the window (first[prev], first[v]).
		lo, hi := first[kept[k-1]], first[v]
		p := hi - 1
		for i := hi - 1; i >= lo; i-- {
			if live[i] > live[p] {
				p = i
			}
		}
		pf := &ir.Node{Op: ir.OpPrefetch, Args: []*ir.Value{h}, Name: v.Def.Name + "/prefetch"}
		y := &ir.Value{Type: v.Type, Def: pf}
		pf.Results = []*ir.Value{y}
		at[p] = append(at[p], pf)
		pre[v] = y
	}
	body := make([]*ir.Node, 0, len(g.Body)+2*len(pre))
	for i, n := range g.Body {
		if i >= start {
			for j, a := range n.Args {
				if y := pre[a]; y != nil {
					n.Args[j] = y
				}
			}
		}
		body = append(body, n)
		body = append(body, after[n]...)
		body = append(body, at[i]...)
	}
	g.Body = body
	return len(pre), len(kept) - 1
}
