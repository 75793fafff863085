package passes

import (
	"github.com/lcc-dev/lcc/ir"
)

// Editor is the function as a rewrite pattern sees it during one sweep of
// ApplyPatterns: who reads each value, which values are outputs, and where each
// node stands, all kept up to date as patterns rewrite. Every query and edit
// costs the size of what it touches, never the size of the body, so that a
// sweep is linear in the function (issue #23: a pass that called f.Uses() per
// candidate node took a minute on a model of 16,000 adds).
//
// Nodes a pattern builds are not in f.Body until the sweep ends: the builder
// hands them to the editor (ir.Builder.DeferInserts), which splices them in
// before the node they were built before. A node the sweep's edits leave unread
// is dead at once: Uses no longer lists it, and it leaves the body at the splice.
type Editor struct {
	f    *ir.Func
	body []*ir.Node // f.Body when the sweep began; new nodes wait in pending
	// pos is a node's index in body or, for a new node, the index of the node it
	// goes before; seq orders new nodes with one pos (old nodes have seq 0).
	pos     map[*ir.Node]int
	seq     map[*ir.Node]int
	pending map[int][]*ir.Node
	added   int
	// readers lists the nodes that read a value, one entry per operand; dead
	// entries are dropped lazily by Uses. reads counts the live entries.
	readers map[*ir.Value][]*ir.Node
	reads   map[*ir.Value]int
	outputs map[*ir.Value][]int // indices into f.Outputs
	dead    map[*ir.Node]bool
	// unread holds nodes whose results an edit may have left without readers.
	unread []*ir.Node
}

// newEditor indexes f for a sweep.
func newEditor(f *ir.Func) *Editor {
	e := &Editor{f: f, body: f.Body, pos: make(map[*ir.Node]int, len(f.Body)), seq: map[*ir.Node]int{},
		pending: map[int][]*ir.Node{}, readers: make(map[*ir.Value][]*ir.Node, len(f.Body)),
		reads: make(map[*ir.Value]int, len(f.Body)), outputs: map[*ir.Value][]int{}, dead: map[*ir.Node]bool{}}
	for i, n := range f.Body {
		e.pos[n] = i
		e.read(n)
	}
	for i, o := range f.Outputs {
		e.outputs[o.Value] = append(e.outputs[o.Value], i)
	}
	return e
}

// read records n's operands as read by n.
func (e *Editor) read(n *ir.Node) {
	for _, a := range n.Args {
		e.readers[a] = append(e.readers[a], n)
		e.reads[a]++
	}
}

// builder returns a builder whose nodes go before body node i.
func (e *Editor) builder(i int) *ir.Builder {
	b := ir.Edit(e.f)
	b.SetInsertPoint(i)
	b.DeferInserts(func(n *ir.Node, before int) {
		e.added++
		e.pos[n], e.seq[n] = before, e.added
		e.pending[before] = append(e.pending[before], n)
		e.read(n)
	})
	return b
}

// Func is the function being rewritten. Its Body lacks the nodes built in this
// sweep; read positions through Pos and readers through Uses.
func (e *Editor) Func() *ir.Func { return e.f }

// Uses lists the live nodes that read v, once per operand that reads it.
func (e *Editor) Uses(v *ir.Value) []*ir.Node {
	rs := e.readers[v]
	live := rs[:0]
	for _, u := range rs {
		if !e.dead[u] {
			live = append(live, u)
		}
	}
	clear(rs[len(live):])
	e.readers[v] = live
	return live
}

// NumUses is len(Uses(v)) in constant time.
func (e *Editor) NumUses(v *ir.Value) int { return e.reads[v] }

// IsOutput reports whether v is one of the function's results.
func (e *Editor) IsOutput(v *ir.Value) bool { return len(e.outputs[v]) > 0 }

// ReadOnce reports whether v has exactly one reader and is not an output, so a
// rewrite of that reader may absorb it.
func (e *Editor) ReadOnce(v *ir.Value) bool { return e.reads[v] == 1 && !e.IsOutput(v) }

// Pos is where n stands: its body index or, for a node built in this sweep, the
// index of the body node it goes before. Give it to Builder.SetInsertPoint to
// build just before n.
func (e *Editor) Pos(n *ir.Node) int { return e.pos[n] }

// Compare orders nodes as the body will hold them once the sweep ends, as
// slices.SortFunc wants.
func (e *Editor) Compare(x, y *ir.Node) int {
	if d := e.pos[x] - e.pos[y]; d != 0 {
		return d
	}
	// New nodes go before the body node of their pos, in the order built.
	sx, sy := e.seq[x], e.seq[y]
	if sx == 0 {
		sx = e.added + 1
	}
	if sy == 0 {
		sy = e.added + 1
	}
	return sx - sy
}

// Replace makes every reader of old, and every output naming it, read new.
func (e *Editor) Replace(old, new *ir.Value) {
	if old == new {
		return
	}
	for _, u := range e.Uses(old) {
		for i, a := range u.Args {
			if a == old {
				u.Args[i] = new
				e.readers[new] = append(e.readers[new], u)
				e.reads[new]++
			}
		}
	}
	delete(e.readers, old)
	delete(e.reads, old)
	for _, i := range e.outputs[old] {
		e.f.Outputs[i].Value = new
		e.outputs[new] = append(e.outputs[new], i)
	}
	delete(e.outputs, old)
	if old.Def != nil {
		e.unread = append(e.unread, old.Def)
	}
}

// removeDead drops the nodes the edits since the last call left without
// readers, and what only they read.
func (e *Editor) removeDead() {
	for len(e.unread) > 0 {
		n := e.unread[len(e.unread)-1]
		e.unread = e.unread[:len(e.unread)-1]
		if e.dead[n] || !e.unused(n) {
			continue
		}
		e.dead[n] = true
		for _, a := range n.Args {
			e.reads[a]--
			if a.Def != nil {
				e.unread = append(e.unread, a.Def)
			}
		}
	}
}

// unused reports whether no result of n is read or an output.
func (e *Editor) unused(n *ir.Node) bool {
	for _, r := range n.Results {
		if e.reads[r] > 0 || e.IsOutput(r) {
			return false
		}
	}
	return true
}

// splice ends the sweep: f.Body becomes the body with the new nodes in place and
// the dead nodes gone.
func (e *Editor) splice() {
	body := make([]*ir.Node, 0, len(e.body)+e.added)
	keep := func(ns []*ir.Node) {
		for _, n := range ns {
			if !e.dead[n] {
				body = append(body, n)
			}
		}
	}
	for i, n := range e.body {
		keep(e.pending[i])
		if !e.dead[n] {
			body = append(body, n)
		}
	}
	keep(e.pending[len(e.body)])
	e.f.Body = body
}
