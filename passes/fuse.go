package passes

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/lcc-dev/lcc/ir"
)

// This file is the fusion of elementwise groups (docs/design.md §11, "Fusion,
// then graphs"): elementwise ops of one output shape, a chain or side by side,
// become one fused_elementwise node (ir/ops_fused_elementwise.go), which codegen renders as
// one kernel that reads each input once, writes each result once and keeps the
// intermediates in registers. It runs on the finished step, after autodiff and
// checkpointing, just before codegen: then the backward's chains (the SwiGLU,
// RoPE and residual gradients around the GEMMs) are there to fuse, and the
// recomputed forward values are fused in the backward where they are recomputed.
//
// Grouping is greedy in body order, as codegen's runs are, but with a group
// open per shape rather than one run. A group is open until a node outside it
// reads one of its results; then it is closed for good. A movement (a
// reshape, concat, transpose, slice, split or expand) that reads one open
// group's results alone does not close it but waits for it: it moves after the
// group's node, as do movements that read only its results, so the query's and
// the key's rotations, each two halves meeting in a concat, are one kernel. An elementwise node
// joins an open group of its own result shape with fewer than MaxOps ops, at
// most fuseWindow nodes after the group's last member: first the group of one
// of its operands' producers (in operand order), else the one joined last (the
// two halves of a rotation, which meet only in a concat). Otherwise it opens a
// group of its own. The fused node takes its last member's place: as nothing
// outside read a member before then (but the movements that wait), and every
// member's operands exist by then, the body keeps its order but for those
// movements, so live ranges, and the peak checkpointing planned, change only
// where values are no longer stored. A member's result
// that a node outside the group reads, or that the function returns, becomes
// one of the fused node's results; the others exist only inside it. Groups of
// one op stay as they are.
//
// Left out, since codegen does better with them alone: the residual adds it
// folds into the norm kernels beside them (codegen/cuda/residual.go), and the
// saved activations it computes again in each elementwise reader's kernel
// (codegen/cuda/recompute.go; as a group's result they would be stored). GEMMs,
// attention, reductions, collectives, offload and prefetch are not
// elementwise, so they bound groups.
//
// Grouping is one walk over the body, not a list of rewrite patterns
// (rewrite.go): a group is a set of nodes, not a pattern at a root.
//
// Codegen already renders each run of adjacent elementwise ops of one shape
// as one kernel, so what fuse adds over it is groups that span the nodes that
// part those runs (the rotations' concats: a flagship-like step launches two
// kernels fewer per layer and direction) and the group as a value of the IR,
// printed, interpreted and reported, where fusion into norms and GEMM
// epilogues can grow.

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
	Name  string   `json:"name,omitempty"`
	Ops   []string `json:"ops"`
	Shape []int64  `json:"shape"`
	// Inputs and Outputs count the node's arguments and results.
	Inputs  int `json:"inputs"`
	Outputs int `json:"outputs"`
	// SavedBytes estimates the memory traffic fusion removes: each member's
	// result that is no longer stored was written once and read by every member
	// reading it, and each input read by several members is now read once.
	SavedBytes int64 `json:"saved_bytes"`
}

// FuseResult is what fuse did to a function.
type FuseResult struct {
	Groups []FuseGroup `json:"groups"`
	// NodesBefore and NodesAfter are the body's lengths.
	NodesBefore int `json:"nodes_before"`
	NodesAfter  int `json:"nodes_after"`
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

// Fuse replaces each group of two or more elementwise ops of f by one
// fused_elementwise node and reports the groups, in body order.
func Fuse(f *ir.Func, c FuseConfig) (FuseResult, error) {
	res := FuseResult{NodesBefore: len(f.Body)}
	uses := f.Uses()
	outputs := f.OutputSet()
	// pos[n] is n's body index, others[i] the number of nodes before index i
	// that are neither elementwise nor literals (constants and fulls, which
	// kernels inline).
	pos := map[*ir.Node]int{}
	others := make([]int, len(f.Body)+1)
	for i, n := range f.Body {
		pos[n] = i
		others[i+1] = others[i]
		if !n.Op.Info().Elementwise && n.Op != ir.OpConstant && n.Op != ir.OpFull {
			others[i+1]++
		}
	}
	group := map[*ir.Node]int{} // member → group number
	// deferred[v]: v is the result of a movement that waits for group
	// deferred[v]'s node.
	deferred := map[*ir.Value]int{}
	var groups []*openGroup
	for i, n := range f.Body {
		g := -1
		if fusible(n, i, uses, pos, others, outputs) {
			g = chooseGroup(n, i, group, deferred, groups, c.maxOps())
			if g < 0 {
				g = len(groups)
				groups = append(groups, &openGroup{open: true})
			}
			group[n] = g
			groups[g].members = append(groups[g].members, n)
			groups[g].last = i
		}
		// n reads the results of the groups it is not in: they are closed,
		// unless n is a movement the group's node can go before.
		read := readGroups(n, g, group, deferred)
		if d, ok := deferrable(n, g, read, groups); ok {
			groups[d].deferred = append(groups[d].deferred, n)
			for _, r := range n.Results {
				deferred[r] = d
			}
			continue
		}
		for _, ga := range read {
			groups[ga].open = false
		}
	}
	fused := map[*ir.Node]*ir.Node{} // member → its group's node
	remap := map[*ir.Value]*ir.Value{}
	var made []*ir.Node
	lastMember := map[*ir.Node]*ir.Node{}
	for _, og := range groups {
		ms := og.members
		// A group none of whose results is read is dead code, dce's business.
		if len(ms) < 2 || !slices.ContainsFunc(ms, func(m *ir.Node) bool { return escapes(m, ms, uses, outputs) }) {
			continue
		}
		node, g := fuseGroup(ms, uses, outputs, remap)
		made = append(made, node)
		lastMember[node] = ms[len(ms)-1]
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
	// Each fused node takes its last member's place, and the movements that
	// wait for it and came before it follow it (those of a group left unfused
	// stay where they are).
	moved := map[*ir.Node]bool{}
	after := map[*ir.Node][]*ir.Node{}
	for _, og := range groups {
		fn := fused[og.members[0]]
		if fn == nil {
			continue
		}
		// Those after the last member stay: they may read values made after it.
		for _, d := range og.deferred {
			if pos[d] < og.last {
				after[fn] = append(after[fn], d)
				moved[d] = true
			}
		}
	}
	body := make([]*ir.Node, 0, len(f.Body))
	for _, n := range f.Body {
		fn := fused[n]
		switch {
		case moved[n]:
		case fn == nil:
			body = append(body, n)
		case lastMember[fn] == n:
			body = append(append(body, fn), after[fn]...)
		}
	}
	f.Body = body
	res.NodesAfter = len(f.Body)
	return res, ir.Verify(f)
}

// fusible says whether n (at body index i) may be a member of a group: an
// elementwise op that is neither a residual add a norm's kernel absorbs nor a
// saved activation that its elementwise readers can compute again.
func fusible(n *ir.Node, i int, uses map[*ir.Value][]*ir.Node, pos map[*ir.Node]int, others []int,
	outputs map[*ir.Value]bool) bool {
	if !n.Op.Info().Elementwise || len(n.Results) != 1 {
		return false
	}
	if recomputed(n, i, uses, pos, others, outputs) {
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

// recomputed says whether n is an elementwise value that codegen computes
// again in each of its readers' kernels rather than storing it
// (codegen/cuda/recompute.go): one read by several elementwise ops of its
// shape, some of them past another kind of node (a forward value the backward
// reads, as SwiGLU's sigmoid(gate) and silu(gate)), so in another group. A group would have to store it as one
// of its results; left alone, every reader's kernel, fused or not, recomputes
// it from its operands, and it is never stored.
func recomputed(n *ir.Node, i int, uses map[*ir.Value][]*ir.Node, pos map[*ir.Node]int, others []int,
	outputs map[*ir.Value]bool) bool {
	r := n.Result()
	us := uses[r]
	if outputs[r] || len(us) < 2 {
		return false
	}
	far := false
	for _, u := range us {
		if !u.Op.Info().Elementwise || len(u.Results) != 1 || !slices.Equal(u.Result().Type.Shape, r.Type.Shape) {
			return false
		}
		far = far || others[pos[u]] > others[i]
	}
	return far
}

// fuseWindow bounds how far past a group's last member a node may join it:
// the group's inputs then live until the fused node, a few nodes later.
const fuseWindow = 24

// openGroup is a group being grown.
type openGroup struct {
	members []*ir.Node
	last    int  // body index of the last member
	open    bool // no node outside it has read a member's result
	// deferred are the movements that read the group's results while it was
	// open, in body order: they move after its node.
	deferred []*ir.Node
}

// movements are the ops that may wait for a group's node: they move no data
// (views, concats its kernel writes in place) or little, and waiting keeps
// the group open, so the two halves of a rotation and the query's and key's
// rotations are one kernel.
var movements = map[ir.Op]bool{
	ir.OpReshape: true, ir.OpConcat: true, ir.OpTranspose: true, ir.OpSlice: true, ir.OpSplit: true,
	ir.OpExpand: true,
}

// readGroups are the groups other than g (n's own, or -1) whose members' or
// movements' results n reads, each once, in operand order.
func readGroups(n *ir.Node, g int, group map[*ir.Node]int, deferred map[*ir.Value]int) []int {
	var read []int
	for _, a := range n.Args {
		ga, ok := group[a.Def]
		if !ok || a.Def == nil {
			ga, ok = deferred[a]
		}
		if ok && ga != g && !slices.Contains(read, ga) {
			read = append(read, ga)
		}
	}
	return read
}

// deferrable says whether n, outside any group (g < 0), is a movement that
// reads the results of one open group, read, alone, and so can wait for it;
// it returns that group.
func deferrable(n *ir.Node, g int, read []int, groups []*openGroup) (int, bool) {
	if g >= 0 || len(read) != 1 || !movements[n.Op] || !groups[read[0]].open {
		return 0, false
	}
	return read[0], true
}

// chooseGroup returns the group node n (at body index i) joins, or -1: never
// one whose movements n reads, as they wait for the group's node.
func chooseGroup(n *ir.Node, i int, group map[*ir.Node]int, deferred map[*ir.Value]int, groups []*openGroup,
	maxOps int) int {
	shape := n.Result().Type.Shape
	fits := func(g int) bool {
		og := groups[g]
		for _, a := range n.Args {
			if d, ok := deferred[a]; ok && d == g {
				return false
			}
		}
		return og.open && len(og.members) < maxOps && i-og.last <= fuseWindow &&
			slices.Equal(og.members[0].Result().Type.Shape, shape)
	}
	for _, a := range n.Args {
		if g, ok := group[a.Def]; ok && a.Def != nil && fits(g) {
			return g
		}
	}
	// The group joined last: groups are appended as they open, so scan back
	// from the newest for the one with the latest member.
	best := -1
	for g := len(groups) - 1; g >= 0 && i-groups[g].last <= fuseWindow*2; g-- {
		if fits(g) && (best < 0 || groups[g].last > groups[best].last) {
			best = g
		}
	}
	return best
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
		readers := 0
		for _, u := range uses[r] {
			if in[u] {
				readers++
			}
		}
		if escapes(m, ms, uses, outputs) {
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

// escapes says whether member m's result is returned or read outside ms.
func escapes(m *ir.Node, ms []*ir.Node, uses map[*ir.Value][]*ir.Node, outputs map[*ir.Value]bool) bool {
	r := m.Result()
	if outputs[r] {
		return true
	}
	for _, u := range uses[r] {
		if !slices.Contains(ms, u) {
			return true
		}
	}
	return false
}
