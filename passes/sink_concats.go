package passes

import (
	"slices"

	"github.com/lcc-dev/lcc/ir"
)

// This file moves elementwise ops through the concats, slices and splits
// around them, so that what codegen places in a concat's buffer (fusion across
// shape changes, docs/design.md §10) is computed there directly. Hugging
// Face's rotate_half is the case it is for: q·cos + cat(−q₂, q₁)·sin copies q₁
// into the concat (a slice is a view, and a view is not placed) and launches
// the negation, the copy and the products apiece, three kernels a tensor and
// direction. Sunk, it is cat(q₁·cos₁ − q₂·sin₁, q₂·cos₂ + q₁·sin₂): two
// elementwise halves of one shape, which fuse into one kernel writing both
// halves of the concat in place, as the flagship's own RoPE does. The
// backward's rotation, cat(t₂, −t₁) + dy·cos with t = dy·sin split in halves,
// becomes the same.
//
// The rewrites are exact: every element is computed by the same operations
// on the same operands, only through other views.

// SinkConcats rewrites elementwise ops of concats into concats of elementwise
// ops, and slices and splits of elementwise ops into elementwise ops of slices.
var SinkConcats = Register(withDoc(Rewrite("sink-concats", sinkConcatPatterns(), sinkMaxSweeps),
	"f(concat(a, b), c) -> concat(f(a, c₁), f(b, c₂)) for elementwise f; slice(f(a, b)) -> f(slice(a), slice(b))"))

// sinkMaxParts bounds the parts of a concat an elementwise op is sunk into.
const sinkMaxParts = 8

// sinkMaxSweeps bounds the pass's sweeps: a concat moves one elementwise op
// down a sweep, so a chain of them after a concat takes a sweep each.
const sinkMaxSweeps = 1024

func sinkConcatPatterns() []Pattern {
	var ps []Pattern
	for _, op := range ir.AllOps() {
		if op.Info().Elementwise {
			// f(concat(a, b), c) -> concat(f(a, slice(c)), f(b, slice(c)))
			ps = append(ps, Pattern{Name: "elementwise-of-concat", Root: op, Rewrite: sinkIntoConcat})
		}
	}
	return append(ps,
		// slice(f(a, b)) -> f(slice(a), slice(b)) when only slices and splits read f
		Pattern{Name: "slice-of-elementwise", Root: ir.OpSlice, Rewrite: sliceOfElementwise},
		// split(f(a, b)) -> f(slice(a), slice(b))… when only slices and splits read f
		Pattern{Name: "split-of-elementwise", Root: ir.OpSplit, Rewrite: splitOfElementwise},
		// slice(concat(a, b)) -> a, or a slice of a, when the slice lies within a
		Pattern{Name: "slice-of-concat", Root: ir.OpSlice, Rewrite: sliceOfConcat},
		// What sinking a sum into zero-padded concats leaves: slices of the
		// pads (slice(full v) -> full v) and additions of them (x+0 -> x).
		Pattern{Name: "slice-of-full", Root: ir.OpSlice, Rewrite: sliceOfFull},
		Pattern{Name: "add-zero", Root: ir.OpAdd, Rewrite: addZero})
}

// span is the range [lo, hi) of one axis.
type span struct{ lo, hi int64 }

// axisOf is the axis of an operand of rank r that lines up with axis ax of a
// result of rank rank (numpy broadcasting aligns the trailing dims); negative
// where the operand has no such axis.
func axisOf(ax, rank, r int) int { return ax - (rank - r) }

// cuttable says whether operand a of a result of rank rank, whose axis ax is
// full long, can be cut along that axis: it broadcasts along it or spans it.
func cuttable(a *ir.Value, ax, rank int, full int64) bool {
	d := axisOf(ax, rank, a.Type.Rank())
	return d < 0 || a.Type.Shape[d] == 1 || a.Type.Shape[d] == full
}

// partOf is operand a's part [s.lo, s.hi) along the result's axis ax (of
// rank), for a cuttable a: a itself where it broadcasts along the axis, else a
// slice.
func partOf(b *ir.Builder, a *ir.Value, ax, rank int, full int64, s span) *ir.Value {
	d := axisOf(ax, rank, a.Type.Rank())
	if d < 0 || a.Type.Shape[d] == 1 || s.lo == 0 && s.hi == full {
		return a
	}
	return b.Apply1(ir.OpSlice, ir.A("axes", []int64{int64(d)}, "starts", []int64{s.lo},
		"ends", []int64{s.hi}, "steps", []int64{1}), a)
}

// sinkIntoConcat rewrites the elementwise node n when one of its operands is
// a concat along an axis n does not broadcast, every reader of which is an
// elementwise op (so that once they are all sunk the concat is gone), of at
// most sinkMaxParts parts of one shape (so that the parts' ops fuse into one
// kernel). Other operands are sliced into the same parts, or taken whole
// where they broadcast along the axis; a concat operand with the same parts
// gives its own.
func sinkIntoConcat(e *Editor, n *ir.Node, b *ir.Builder) bool {
	if len(n.Results) != 1 {
		return false
	}
	rank := n.Result().Type.Rank()
	var cat *ir.Node
	ax := -1
	for _, a := range n.Args {
		c := a.Def
		if c == nil || c.Op != ir.OpConcat || len(c.Args) < 2 || len(c.Args) > sinkMaxParts || e.IsOutput(a) {
			continue
		}
		d, err := ir.AxisIndex(c.AttrInt("axis"), a.Type.Rank())
		if err != nil {
			continue
		}
		rx := d + rank - a.Type.Rank()
		if a.Type.Shape[d] != n.Result().Type.Shape[rx] || !sinkable(e, a) {
			continue
		}
		equal := true
		for _, p := range c.Args[1:] {
			equal = equal && slices.Equal(p.Type.Shape, c.Args[0].Type.Shape)
		}
		if equal {
			cat, ax = c, rx
			break
		}
	}
	if cat == nil {
		return false
	}
	full := n.Result().Type.Shape[ax]
	for _, a := range n.Args {
		if !cuttable(a, ax, rank, full) {
			return false
		}
	}
	var spans []span
	var off int64
	d := axisOf(ax, rank, cat.Result().Type.Rank())
	for _, p := range cat.Args {
		spans = append(spans, span{off, off + p.Type.Shape[d]})
		off += p.Type.Shape[d]
	}
	parts := make([]*ir.Value, len(spans))
	for i, s := range spans {
		args := make([]*ir.Value, len(n.Args))
		for j, a := range n.Args {
			if a == cat.Result() {
				args[j] = cat.Args[i]
				continue
			}
			if c := a.Def; c != nil && c.Op == ir.OpConcat && sameParts(c, cat) {
				args[j] = c.Args[i]
				continue
			}
			args[j] = partOf(b, a, ax, rank, full, s)
		}
		parts[i] = b.Apply1(n.Op, n.Attrs, args...)
	}
	e.Replace(n.Result(), b.Apply1(ir.OpConcat, ir.A("axis", int64(ax)), parts...))
	return true
}

// sinkable says whether every reader of v is an elementwise op.
func sinkable(e *Editor, v *ir.Value) bool {
	for _, u := range e.Uses(v) {
		if !u.Op.Info().Elementwise || len(u.Results) != 1 {
			return false
		}
	}
	return true
}

// sameParts says whether concats c and d split the same shape the same way.
func sameParts(c, d *ir.Node) bool {
	if len(c.Args) != len(d.Args) || !c.Result().Type.Equal(d.Result().Type) || c.AttrInt("axis") != d.AttrInt("axis") {
		return false
	}
	for i := range c.Args {
		if !slices.Equal(c.Args[i].Type.Shape, d.Args[i].Type.Shape) {
			return false
		}
	}
	return true
}

// slicedElementwise is the elementwise node whose result x a slice or split
// reads, when only slices and splits read it (so that once they are all
// rewritten it is gone), all their parts have one shape (so that the parts'
// ops fuse into one kernel, as f's one op was) and x is no output; nil
// otherwise.
func slicedElementwise(e *Editor, x *ir.Value) *ir.Node {
	f := x.Def
	if f == nil || !f.Op.Info().Elementwise || len(f.Results) != 1 || e.IsOutput(x) {
		return nil
	}
	var shape []int64
	for _, u := range e.Uses(x) {
		if u.Op != ir.OpSlice && u.Op != ir.OpSplit {
			return nil
		}
		for _, r := range u.Results {
			if shape == nil {
				shape = r.Type.Shape
			} else if !slices.Equal(shape, r.Type.Shape) {
				return nil
			}
		}
	}
	return f
}

// cuttableAlong says whether every operand of f can be cut along each of axes.
func cuttableAlong(f *ir.Node, axes []int) bool {
	rank := f.Result().Type.Rank()
	for _, a := range f.Args {
		for _, ax := range axes {
			if !cuttable(a, ax, rank, f.Result().Type.Shape[ax]) {
				return false
			}
		}
	}
	return true
}

// elementwiseOver rebuilds f (cuttableAlong axes) on the part of its result
// that spans[k] cuts along each axis axes[k], with unit steps.
func elementwiseOver(b *ir.Builder, f *ir.Node, axes []int, spans []span) *ir.Value {
	rank := f.Result().Type.Rank()
	args := make([]*ir.Value, len(f.Args))
	for j, a := range f.Args {
		v := a
		for k, ax := range axes {
			v = partOf(b, v, ax, rank, f.Result().Type.Shape[ax], spans[k])
		}
		args[j] = v
	}
	return b.Apply1(f.Op, f.Attrs, args...)
}

// sliceOfElementwise rewrites slice(f(a, b)) with unit steps as f(slice(a),
// slice(b)), the operands sliced where they do not broadcast.
func sliceOfElementwise(e *Editor, n *ir.Node, b *ir.Builder) bool {
	f := slicedElementwise(e, n.Args[0])
	if f == nil {
		return false
	}
	axes, spans, ok := sliceSpans(n)
	if !ok || !cuttableAlong(f, axes) {
		return false
	}
	e.Replace(n.Result(), elementwiseOver(b, f, axes, spans))
	return true
}

// sliceSpans is a slice's axes and ranges, when every step is 1.
func sliceSpans(n *ir.Node) ([]int, []span, bool) {
	x := n.Args[0].Type
	var axes []int
	var spans []span
	starts, ends, steps := n.AttrInts("starts"), n.AttrInts("ends"), n.AttrInts("steps")
	for i, a := range n.AttrInts("axes") {
		ax, err := ir.AxisIndex(a, x.Rank())
		if err != nil || steps[i] != 1 || ends[i] < starts[i] {
			return nil, nil, false
		}
		axes = append(axes, ax)
		spans = append(spans, span{starts[i], min(ends[i], x.Shape[ax])})
	}
	return axes, spans, true
}

// splitOfElementwise rewrites split(f(a, b)) as one f of the operands' parts
// for each of the split's results.
func splitOfElementwise(e *Editor, n *ir.Node, b *ir.Builder) bool {
	f := slicedElementwise(e, n.Args[0])
	if f == nil {
		return false
	}
	ax, err := ir.AxisIndex(n.AttrInt("axis"), n.Args[0].Type.Rank())
	if err != nil || !cuttableAlong(f, []int{ax}) {
		return false
	}
	var off int64
	for _, r := range n.Results {
		s := span{off, off + r.Type.Shape[ax]}
		off = s.hi
		e.Replace(r, elementwiseOver(b, f, []int{ax}, []span{s}))
	}
	return true
}

// sliceOfConcat rewrites a slice of a concat along its axis, with a unit
// step, that lies within one part as that part (when it is exactly the part)
// or as the slice of it.
func sliceOfConcat(e *Editor, n *ir.Node, b *ir.Builder) bool {
	c := n.Args[0].Def
	if c == nil || c.Op != ir.OpConcat {
		return false
	}
	axes, spans, ok := sliceSpans(n)
	if !ok || len(axes) != 1 {
		return false
	}
	ax, err := ir.AxisIndex(c.AttrInt("axis"), n.Args[0].Type.Rank())
	if err != nil || axes[0] != ax {
		return false
	}
	var off int64
	for _, p := range c.Args {
		in, size := span{spans[0].lo - off, spans[0].hi - off}, p.Type.Shape[ax]
		if in.lo >= 0 && in.hi <= size && in.lo < in.hi {
			e.Replace(n.Result(), partOf(b, p, ax, p.Type.Rank(), size, in))
			return true
		}
		off += size
	}
	return false
}

// sliceOfFull rewrites a slice of a full as a full of the slice's type.
func sliceOfFull(e *Editor, n *ir.Node, b *ir.Builder) bool {
	x := n.Args[0].Def
	if x == nil || x.Op != ir.OpFull {
		return false
	}
	e.Replace(n.Result(), b.Full(n.Result().Type, x.AttrFloat("value")))
	return true
}
