package passes

import (
	"fmt"
	"slices"

	"github.com/lcc-dev/lcc/ir"
)

// RewriteRoPEPositions makes the model read per-token positions that restart at each
// packed document: pos[b,t] = t − starts[b,t]. A position_ids input, when the model
// has one, is computed from starts (and leaves the step's inputs). Otherwise every
// RoPE table is rewritten: a constant whose rows are positions 0..T−1 (the folded cos
// and sin of an export) becomes a gather of its rows by pos, which is exact since a
// restarted position is always one of 0..T−1; and a run-time positions range (RoPE
// too long to fold) becomes pos itself. A model with neither is refused: its
// positions could not restart.
//
// The branch rope (--rope-theta) finds RoPE's frequencies with a matcher of its own;
// this one needs only the tables' position axis, so the two stay apart for now.
func RewriteRoPEPositions(f *ir.Func, starts *ir.Value) error {
	bs, ts := starts.Type.Shape[0], starts.Type.Shape[1]
	b := ir.Edit(f)
	b.SetInsertPoint(0)
	b.SetName("doc_positions")
	pos := b.Sub(b.Apply1(ir.OpRange, ir.A("start", 0.0, "count", ts)), starts) // i64 [B,T]
	if p := f.Param("position_ids"); p != nil {
		t := p.Value.Type
		if !t.DType.IsInt() || t.Rank() != 2 || t.Shape[1] != ts || (t.Shape[0] != bs && t.Shape[0] != 1) ||
			(t.Shape[0] == 1 && bs != 1) {
			return fmt.Errorf("pack-documents: input position_ids %v: want integer [%d,%d]", t, bs, ts)
		}
		f.ReplaceUses(p.Value, b.Cast(pos, t.DType))
		f.Params = slices.DeleteFunc(f.Params, func(q *ir.Param) bool { return q == p })
		return nil
	}
	hits, uses := 0, f.Uses()
	for i := 0; i < len(f.Body); i++ {
		n := f.Body[i]
		var repl, rows *ir.Value
		switch n.Op {
		case ir.OpConstant:
			shape, ok := positionTable(n, uses[n.Results[0]], bs, ts)
			if !ok {
				continue
			}
			// table [..T..] -> gather(table as [T, rest], pos) shaped for its readers
			b.SetInsertPoint(i + 1)
			b.SetName(n.Name)
			v := n.Results[0]
			rest := v.Type.Numel() / ts
			rows = b.Reshape(v, ts, rest)
			repl = b.Reshape(b.Apply1(ir.OpGather, ir.A("axis", int64(0)), rows, pos), shape...)
		case ir.OpRange:
			if n.AttrInt("count") != ts || n.AttrFloat("start") != 0 || n.AttrFloat("delta") != 1 ||
				n.Results[0].Type.Rank() != 1 || !feedsTrig(uses, n.Results[0]) {
				continue
			}
			// range(T) feeding cos/sin -> the document positions (one row: B = 1)
			if bs != 1 {
				return fmt.Errorf("pack-documents: %s: RoPE computed from a positions range needs "+
					"--batch=1 (or a position_ids input)", n.Where())
			}
			b.SetInsertPoint(i + 1)
			b.SetName(n.Name)
			repl = b.Reshape(b.Cast(pos, n.Results[0].Type.DType), ts)
		default:
			continue
		}
		old := n.Results[0]
		f.ReplaceUses(old, repl)
		if rows != nil {
			rows.Def.Args[0] = old // the gather reads the table itself
		}
		hits++
	}
	if err := b.Err(); err != nil {
		return fmt.Errorf("pack-documents: %w", err)
	}
	if hits == 0 {
		return fmt.Errorf("pack-documents: the model has no position_ids input and no RoPE table "+
			"of its %d positions: its positions cannot restart at each document", ts)
	}
	return nil
}

// positionTable says whether constant n is a RoPE table of T positions, and returns
// the shape its gathered replacement takes: n's shape with the batch in front, so that
// its readers (elementwise products with [B,..] activations) keep their result types.
// A table has one axis of T rows that is not the last, every other axis but the last
// of size 1, values in [−1, 1], a first row all ones (cos) or all zeros (sin) and rows
// that differ; each reader is an elementwise product.
func positionTable(n *ir.Node, readers []*ir.Node, bs, ts int64) ([]int64, bool) {
	v := n.Results[0]
	t := n.AttrTensor("value")
	sh := v.Type.Shape
	if t == nil || !t.DType.IsFloat() || len(sh) < 2 || ts < 2 {
		return nil, false
	}
	axis := -1
	for a, d := range sh[:len(sh)-1] {
		switch {
		case d == ts && axis < 0:
			axis = a
		case d != 1:
			return nil, false
		}
	}
	h := sh[len(sh)-1]
	if axis < 0 || int64(len(t.F)) != ts*h {
		return nil, false
	}
	first := t.F[0]
	if first != 0 && first != 1 {
		return nil, false
	}
	differs := false
	for i, x := range t.F {
		if x < -1 || x > 1 || (int64(i) < h && x != first) {
			return nil, false
		}
		differs = differs || (int64(i) >= h && x != t.F[int64(i)%h])
	}
	if !differs {
		return nil, false
	}
	rank := len(sh)
	for _, u := range readers {
		if u.Op != ir.OpMul {
			return nil, false
		}
		rank = max(rank, u.Results[0].Type.Rank())
	}
	shape := slices.Concat(slices.Repeat([]int64{1}, rank-len(sh)), sh)
	shape[0] = bs
	return shape, len(readers) > 0
}

// feedsTrig says whether v reaches a cos or sin through elementwise ops and reshapes.
func feedsTrig(uses map[*ir.Value][]*ir.Node, v *ir.Value) bool {
	seen := map[*ir.Value]bool{}
	var walk func(v *ir.Value, depth int) bool
	walk = func(v *ir.Value, depth int) bool {
		if seen[v] || depth > 8 {
			return false
		}
		seen[v] = true
		for _, u := range uses[v] {
			switch u.Op {
			case ir.OpCos, ir.OpSin:
				return true
			case ir.OpMul, ir.OpAdd, ir.OpDiv, ir.OpCast, ir.OpReshape, ir.OpExpand,
				ir.OpMatMul, ir.OpTranspose, ir.OpConcat:
				if walk(u.Results[0], depth+1) {
					return true
				}
			}
		}
		return false
	}
	return walk(v, 0)
}
