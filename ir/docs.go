package ir

import "fmt"

// This file is the one home of packed documents in the IR (docs/design.md §3,
// "Packed documents"). An attention-family node with the docs attribute takes one
// more operand after its usual ones: doc starts, an integer [B, T] whose entry for a
// query is the global position of the first token of that query's document. Within a
// row the starts are non-decreasing and each document is a run of positions, so key j
// belongs to query t's document iff start[t] ≤ j, given causality (j ≤ t). The mask
// is then "causal and j ≥ start[t]": it needs no key-side ids, which is why a ring
// block or a flash tile can decide it from global positions alone. Document masks are
// causal only; an explicit mask and doc starts do not combine.

// DocStarts is n's doc-starts operand, or nil when n has no document mask.
func DocStarts(n *Node) *Value {
	if !HasDocs(n) {
		return nil
	}
	return n.Args[len(n.Args)-1]
}

// HasDocs says whether n carries a document mask: any node, false for ops without
// the docs attribute.
func HasDocs(n *Node) bool {
	v, _ := n.Attrs.Get("docs")
	b, _ := v.(bool)
	return b
}

// checkDocs validates the doc-starts operand of n, an attention-family node whose
// queries are q [B, T, H, D] and whose operands are want long with the starts.
func checkDocs(n *Node, want int) error {
	if !HasDocs(n) {
		return nil
	}
	if len(n.Args) != want {
		return fmt.Errorf("docs needs %d operands (the doc starts last), got %d", want, len(n.Args))
	}
	if !n.AttrBool("causal") {
		return fmt.Errorf("a document mask needs causal attention")
	}
	q, s := n.Args[0].Type, n.Args[len(n.Args)-1].Type
	if !s.DType.IsInt() || s.Rank() != 2 || s.Shape[0] != q.Shape[0] || s.Shape[1] != q.Shape[1] {
		return fmt.Errorf("doc starts %v: want integer [B,T] = [%d,%d]", s, q.Shape[0], q.Shape[1])
	}
	return nil
}
