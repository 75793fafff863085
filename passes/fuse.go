package passes

import (
	"container/heap"
	"fmt"
	"slices"
	"strconv"

	"github.com/lcc-dev/lcc/ir"
)

// This file is the fusion of elementwise groups (docs/design.md §11, "Fusion,
// then graphs"): connected elementwise ops of one output shape become one
// fused_elementwise node (ir/ops_fused_elementwise.go), which codegen renders as
// one kernel that reads each input once, writes each result once and keeps the
// intermediates in registers. It runs on the finished step, after autodiff and
// checkpointing, just before codegen: then the backward's chains (the SwiGLU,
// RoPE and residual gradients around the GEMMs) are there to fuse, and the
// recomputed forward values are fused in the backward where they are recomputed.
//
// Grouping is greedy in body order. An elementwise node joins the group of one
// of its operands' producers when
//
//   - its result has the group's shape (one index space for the kernel);
//   - none of its other operands depends on the group through a node outside
//     it (else the group, as one node, would both feed and read that node);
//   - the group holds fewer than MaxOps ops.
//
// Otherwise it starts a group of its own. A member's result that a node
// outside the group reads, or that the function returns, becomes one of the
// fused node's results; the others exist only inside it. Groups of one op stay
// as they are. Each fused node takes the place of its last member, and the few
// nodes that read an earlier member's result move after it (a stable
// topological order, so everything else keeps its place).
//
// Left out: the residual adds codegen folds into the norm kernels beside them
// (codegen/cuda/residual.go): fusing them elsewhere would cost the norm's
// kernel its fused add. GEMMs, attention, reductions, collectives, offload and
// prefetch are not elementwise, so they bound groups.

// FuseConfig configures fuse.
type FuseConfig struct {
	// MaxOps caps the ops of one group (0: DefaultFuseMaxOps), bounding a
	// kernel's registers and its source's size.
	MaxOps int
}

// DefaultFuseMaxOps is the cap of a FuseConfig without one.
const DefaultFuseMaxOps = 32

func (c FuseConfig) maxOps() int {
	if c.MaxOps <= 0 {
		return DefaultFuseMaxOps
	}
	return c.MaxOps
}

// String prints the configuration in ParsePipeline's syntax.
func (c FuseConfig) String() string { return fmt.Sprintf("max-ops=%d", c.maxOps()) }

// FuseGroup is one fused_elementwise node fuse made.
type FuseGroup struct {
	// Name is the fused node's name (its last member's), Ops its members' ops
	// in order, Shape the group's output shape.
	Name  string
	Ops   []string
	Shape []int64
	// Inputs and Outputs count the node's arguments and results.
	Inputs, Outputs int
	// SavedBytes estimates the memory traffic fusion removes: each member's
	// result that is no longer stored was written once and read by every member
	// reading it, and each input read by several members is now read once.
	SavedBytes int64
}

// FuseResult is what fuse did to a function.
type FuseResult struct {
	Groups []FuseGroup
	// NodesBefore and NodesAfter are the body's lengths.
	NodesBefore, NodesAfter int
}

// SavedBytes is the sum over the groups.
func (r FuseResult) SavedBytes() int64 {
	var s int64
	for _, g := range r.Groups {
		s += g.SavedBytes
	}
	return s
}

// FusePass is fuse with c as a pass.
func FusePass(c FuseConfig) Pass {
	return Pass{Name: "fuse", Config: c.String(),
		Doc: "fuse groups of elementwise ops into fused_elementwise nodes (one GPU kernel each)",
		Run: func(f *ir.Func) error { _, err := Fuse(f, c); return err }}
}

var _ = RegisterConfigurable(FusePass(FuseConfig{}), func(a *Args) (Pass, error) {
	return FusePass(FuseConfig{MaxOps: int(a.Int("max-ops", DefaultFuseMaxOps))}), nil
})

// bitset is a set of group numbers.
type bitset []uint64

func (s bitset) has(i int) bool { return i/64 < len(s) && s[i/64]&(1<<(i%64)) != 0 }

func (s *bitset) add(i int) {
	for len(*s) <= i/64 {
		*s = append(*s, 0)
	}
	(*s)[i/64] |= 1 << (i % 64)
}

func (s *bitset) union(t bitset) {
	for len(*s) < len(t) {
		*s = append(*s, 0)
	}
	for i, w := range t {
		(*s)[i] |= w
	}
}

// Fuse replaces each group of two or more elementwise ops of f by one
// fused_elementwise node and reports the groups, in body order.
func Fuse(f *ir.Func, c FuseConfig) (FuseResult, error) {
	res := FuseResult{NodesBefore: len(f.Body)}
	uses := f.Uses()
	outputs := f.OutputSet()
	group := map[*ir.Node]int{} // member → group number
	var members [][]*ir.Node
	// dep[v]: the groups v depends on, through any path (members included).
	dep := map[*ir.Value]bitset{}
	for _, n := range f.Body {
		var d bitset
		for _, a := range n.Args {
			d.union(dep[a])
		}
		if fusible(n, uses) {
			g := joinable(n, group, members, dep, c.maxOps())
			if g < 0 {
				g = len(members)
				members = append(members, nil)
			}
			group[n] = g
			members[g] = append(members[g], n)
			d.add(g)
		}
		for _, r := range n.Results {
			dep[r] = d
		}
	}
	fused := map[*ir.Node]*ir.Node{} // member → its group's node
	remap := map[*ir.Value]*ir.Value{}
	var made []*ir.Node
	for _, ms := range members {
		if len(ms) < 2 {
			continue
		}
		node, g := fuseGroup(ms, uses, outputs, remap)
		made = append(made, node)
		for _, m := range ms {
			fused[m] = node
		}
		res.Groups = append(res.Groups, g)
	}
	if len(res.Groups) == 0 {
		res.NodesAfter = len(f.Body)
		return res, nil
	}
	// The step's other nodes and the fused ones read the new results (a group
	// may read another's).
	var readers []*ir.Node
	for _, n := range f.Body {
		if fused[n] == nil {
			readers = append(readers, n)
		}
	}
	for _, n := range append(readers, made...) {
		for i, a := range n.Args {
			if r, ok := remap[a]; ok {
				n.Args[i] = r
			}
		}
	}
	for i, o := range f.Outputs {
		if r, ok := remap[o.Value]; ok {
			f.Outputs[i].Value = r
		}
	}
	f.Body = reorder(f.Body, fused)
	res.NodesAfter = len(f.Body)
	return res, ir.Verify(f)
}

// fusible says whether n may be a member of a group: an elementwise op that is
// not a residual add a norm's kernel absorbs.
func fusible(n *ir.Node, uses map[*ir.Value][]*ir.Node) bool {
	if !n.Op.Info().Elementwise || len(n.Results) != 1 {
		return false
	}
	if n.Op != ir.OpAdd {
		return true
	}
	// add(a, b) normalised next: rms_norm / layer_norm(add(a, b)).
	for _, u := range uses[n.Result()] {
		if (u.Op == ir.OpRMSNorm || u.Op == ir.OpLayerNorm) && u.Args[0] == n.Result() {
			return false
		}
	}
	// add(r, norm_grad(...).dx), dx read by this add alone.
	for _, a := range n.Args {
		if d := a.Def; d != nil && (d.Op == ir.OpRMSNormGrad || d.Op == ir.OpLayerNormGrad) &&
			a.Index == 0 && len(uses[a]) == 1 {
			return false
		}
	}
	return true
}

// joinable returns the group n can join, or -1: the first group among its
// operands' producers (in operand order) of n's shape, with room, on which no
// other operand depends through a node outside it.
func joinable(n *ir.Node, group map[*ir.Node]int, members [][]*ir.Node, dep map[*ir.Value]bitset,
	maxOps int) int {
	shape := n.Result().Type.Shape
	for _, a := range n.Args {
		g, ok := group[a.Def]
		if a.Def == nil || !ok || len(members[g]) >= maxOps ||
			!slices.Equal(members[g][0].Result().Type.Shape, shape) {
			continue
		}
		legal := true
		for _, b := range n.Args {
			if gb, in := group[b.Def]; b.Def != nil && in && gb == g {
				continue
			}
			legal = legal && !dep[b].has(g)
		}
		if legal {
			return g
		}
	}
	return -1
}

// fuseGroup makes the fused_elementwise node of members ms (in body order),
// recording in remap the node's result that stands for each member result read
// outside the group.
func fuseGroup(ms []*ir.Node, uses map[*ir.Value][]*ir.Node, outputs map[*ir.Value]bool,
	remap map[*ir.Value]*ir.Value) (*ir.Node, FuseGroup) {
	in := map[*ir.Node]bool{}
	for _, m := range ms {
		in[m] = true
	}
	body := &ir.Func{Name: "fused"}
	inner := map[*ir.Value]*ir.Value{}
	node := &ir.Node{Op: ir.OpFusedElementwise, Name: ms[len(ms)-1].Name}
	g := FuseGroup{Name: node.Name, Shape: slices.Clone(ms[0].Result().Type.Shape)}
	reads := map[*ir.Value]int{} // outer value → member operands reading it
	var escaping []*ir.Value
	for _, m := range ms {
		bm := &ir.Node{Op: m.Op, Attrs: m.Attrs.Clone()}
		for _, a := range m.Args {
			if _, ok := inner[a]; !ok {
				inner[a] = body.AddParam(strconv.Itoa(len(node.Args)), ir.RoleInput, a.Type, nil)
				node.Args = append(node.Args, a)
			}
			if a.Def == nil || !in[a.Def] {
				reads[a]++
			}
			bm.Args = append(bm.Args, inner[a])
		}
		r := m.Result()
		br := &ir.Value{Type: r.Type, Def: bm}
		bm.Results = []*ir.Value{br}
		inner[r] = br
		body.Body = append(body.Body, bm)
		g.Ops = append(g.Ops, m.Op.String())
		escapes := outputs[r]
		readers := 0
		for _, u := range uses[r] {
			escapes = escapes || !in[u]
			if in[u] {
				readers++
			}
		}
		if escapes {
			escaping = append(escaping, r)
			body.Outputs = append(body.Outputs, ir.Output{Name: strconv.Itoa(len(body.Outputs)), Value: br})
		} else {
			// Never stored: its one write and its readers' loads are gone.
			g.SavedBytes += r.Type.Bytes() * int64(1+readers)
		}
	}
	// An input several members read is loaded once now.
	for a, k := range reads {
		if k > 1 {
			g.SavedBytes += a.Type.Bytes() * int64(k-1)
		}
	}
	node.Attrs = ir.A(ir.FusedBodyAttr, ir.FusedBodyText(body))
	for i, r := range escaping {
		nr := &ir.Value{Type: r.Type, Def: node, Index: i}
		node.Results = append(node.Results, nr)
		remap[r] = nr
	}
	g.Inputs, g.Outputs = len(node.Args), len(node.Results)
	return node, g
}

// reorder is body with each group's members replaced by its fused node, in a
// stable topological order: a node (a fused node: its last member) keeps its
// index as priority, and waits only for its operands.
func reorder(body []*ir.Node, fused map[*ir.Node]*ir.Node) []*ir.Node {
	prio := map[*ir.Node]int{}
	var nodes []*ir.Node
	for i, n := range body {
		if fn := fused[n]; fn != nil {
			n = fn
		}
		if _, seen := prio[n]; !seen {
			nodes = append(nodes, n)
		}
		prio[n] = i // a fused node's last member
	}
	waiting := map[*ir.Node]int{}
	readers := map[*ir.Node][]*ir.Node{}
	for _, n := range nodes {
		defs := map[*ir.Node]bool{}
		for _, a := range n.Args {
			if a.Def != nil && !defs[a.Def] {
				defs[a.Def] = true
				waiting[n]++
				readers[a.Def] = append(readers[a.Def], n)
			}
		}
	}
	q := &nodeHeap{prio: prio}
	for _, n := range nodes {
		if waiting[n] == 0 {
			heap.Push(q, n)
		}
	}
	out := make([]*ir.Node, 0, len(nodes))
	for q.Len() > 0 {
		n := heap.Pop(q).(*ir.Node)
		out = append(out, n)
		for _, r := range readers[n] {
			if waiting[r]--; waiting[r] == 0 {
				heap.Push(q, r)
			}
		}
	}
	if len(out) != len(nodes) {
		panic("lcc: BUG: fuse made a cycle")
	}
	return out
}

// nodeHeap is a min-heap of nodes by priority.
type nodeHeap struct {
	nodes []*ir.Node
	prio  map[*ir.Node]int
}

func (h *nodeHeap) Len() int           { return len(h.nodes) }
func (h *nodeHeap) Less(i, j int) bool { return h.prio[h.nodes[i]] < h.prio[h.nodes[j]] }
func (h *nodeHeap) Swap(i, j int)      { h.nodes[i], h.nodes[j] = h.nodes[j], h.nodes[i] }
func (h *nodeHeap) Push(x any)         { h.nodes = append(h.nodes, x.(*ir.Node)) }
func (h *nodeHeap) Pop() any {
	n := h.nodes[len(h.nodes)-1]
	h.nodes = h.nodes[:len(h.nodes)-1]
	return n
}
