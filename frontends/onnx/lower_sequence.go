package onnx

// ONNX sequence ops, lowered when every position is known at compile time.
//
// PyTorch's exporter writes torch.split and tensor lists as sequences when its
// optimizer does not run (torch.onnx.export(..., optimize=False)): SplitToSequence
// then SequenceAt with constant positions, ConcatFromSequence of SequenceConstruct.
// Such a sequence is a list of tensors fixed at compile time, so the lowering keeps
// it as a Go list of values (val.seq) and every op on it becomes list work plus the
// tensor ops the list's elements need: a split, a concat or a stack. lcc's IR has no
// sequence type, so a sequence that reaches a graph output, or a position that is
// known only at run time, is an error naming the node.

import (
	"fmt"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// sequenceLowering lowers a sequence op: it returns the node's one output, a
// sequence (seq) or a tensor.
type sequenceLowering func(c *nodeCtx) (*val, error)

// sequenceLowerings holds the sequence ops, beside lowerings (which hold tensor ops).
var sequenceLowerings = map[string]sequenceLowering{
	"SplitToSequence":    lowerSplitToSequence,
	"SequenceAt":         lowerSequenceAt,
	"SequenceConstruct":  lowerSequenceConstruct,
	"SequenceEmpty":      func(*nodeCtx) (*val, error) { return &val{seq: []*val{}}, nil },
	"SequenceLength":     lowerSequenceLength,
	"SequenceInsert":     lowerSequenceInsert,
	"SequenceErase":      lowerSequenceErase,
	"ConcatFromSequence": lowerConcatFromSequence,
}

// sequenceNode lowers n, a sequence op.
func (l *lowerer) sequenceNode(n *Node, lower sequenceLowering) error {
	if len(n.Outputs) != 1 || n.Outputs[0] == "" {
		return fmt.Errorf("%s has %d outputs, want 1", n.OpType, len(n.Outputs))
	}
	l.b.SetName(nodeName(n))
	out, err := lower(&nodeCtx{l: l, n: n, b: l.b})
	if err == nil {
		err = l.b.Err()
	}
	if err != nil {
		return err
	}
	l.env[n.Outputs[0]] = out
	return nil
}

// seqIn returns input i, which must be a sequence.
func (c *nodeCtx) seqIn(i int) ([]*val, error) {
	if !c.has(i) {
		return nil, fmt.Errorf("required input %d is missing", i)
	}
	e := c.l.env[c.n.Inputs[i]]
	if e == nil || e.seq == nil {
		return nil, fmt.Errorf("input %q is not a sequence", c.n.Inputs[i])
	}
	return e.seq, nil
}

// tensorVal returns input i as an element of a sequence (a tensor, never a sequence).
func (c *nodeCtx) tensorVal(i int) (*val, error) {
	if !c.has(i) {
		return nil, fmt.Errorf("required input %d is missing", i)
	}
	e := c.l.env[c.n.Inputs[i]]
	if e == nil || e.seq != nil {
		return nil, fmt.Errorf("input %q is a sequence, want a tensor", c.n.Inputs[i])
	}
	return e, nil
}

// position reads input i, a position in a sequence of n elements (negative counts
// from the end); end allows n itself (SequenceInsert's append). Absent, it is def.
func (c *nodeCtx) position(i, n int, end bool, def int) (int, error) {
	if !c.has(i) {
		return def, nil
	}
	t, err := c.constIn(i)
	if err != nil {
		return 0, fmt.Errorf("position %q: %w (lcc lowers sequences whose positions are known at "+
			"compile time)", c.n.Inputs[i], err)
	}
	if t.Numel() != 1 || !t.DType.IsInt() {
		return 0, fmt.Errorf("position %q is %v %v, want an integer scalar", c.n.Inputs[i], t.DType, t.Shape)
	}
	p, hi := int(t.Int(0)), n-1
	if end {
		hi = n
	}
	if p < 0 {
		p += n
	}
	if p < 0 || p > hi {
		return 0, fmt.Errorf("position %d is outside a sequence of %d tensors", t.Int(0), n)
	}
	return p, nil
}

// SplitToSequence(x, split?) {axis, keepdims}: split sizes from a 1-D split, chunks
// of a scalar split (the last one smaller), or slices of size 1 without one
// (squeezed unless keepdims).
func lowerSplitToSequence(c *nodeCtx) (*val, error) {
	x, ax, d, err := c.splitInput()
	if err != nil {
		return nil, err
	}
	var sizes []int64
	squeeze := false
	if c.has(1) {
		t, err := c.constIn(1)
		if err != nil {
			return nil, fmt.Errorf("split %q: %w", c.n.Inputs[1], err)
		}
		if sizes = t.Ints(); len(t.Shape) == 0 {
			if sizes[0] <= 0 {
				return nil, fmt.Errorf("split %d: want a positive chunk size", sizes[0])
			}
			sizes = chunks(d, sizes[0])
		}
	} else {
		squeeze = c.aInt("keepdims", 1) == 0
		for range d {
			sizes = append(sizes, 1)
		}
	}
	var sum int64
	for _, s := range sizes {
		if s < 0 {
			return nil, fmt.Errorf("split sizes %v: negative", sizes)
		}
		sum += s
	}
	if sum != d {
		return nil, fmt.Errorf("split sizes %v add to %d, but axis %d of %v is %d", sizes, sum, ax, x.Type.Shape, d)
	}
	parts := []*ir.Value{x}
	if len(sizes) > 1 {
		parts = c.b.Apply(ir.OpSplit, ir.A("axis", int64(ax), "sizes", sizes), x)
	}
	seq := make([]*val, len(sizes))
	for i, p := range parts[:len(sizes)] {
		if squeeze {
			shape := append(append([]int64(nil), x.Type.Shape[:ax]...), x.Type.Shape[ax+1:]...)
			p = c.b.Reshape(p, shape...)
		}
		seq[i] = &val{v: p}
	}
	return &val{seq: seq}, nil
}

// splitInput returns a split's input 0, its axis (attribute axis) and that axis's size.
func (c *nodeCtx) splitInput() (x *ir.Value, ax int, d int64, err error) {
	x = c.in(0)
	if ax, err = ir.AxisIndex(c.aInt("axis", 0), x.Type.Rank()); err != nil {
		return nil, 0, 0, err
	}
	return x, ax, x.Type.Shape[ax], nil
}

// chunks splits d into pieces of chunk, the last one smaller.
func chunks(d, chunk int64) []int64 {
	var sizes []int64
	for rest := d; rest > 0; rest -= chunk {
		sizes = append(sizes, min(chunk, rest))
	}
	return sizes
}

// SequenceAt(seq, position): the element.
func lowerSequenceAt(c *nodeCtx) (*val, error) {
	seq, err := c.seqIn(0)
	if err != nil {
		return nil, err
	}
	if !c.has(1) {
		return nil, fmt.Errorf("required input 1 (position) is missing")
	}
	p, err := c.position(1, len(seq), false, 0)
	if err != nil {
		return nil, err
	}
	return seq[p], nil
}

// SequenceConstruct(x...): the sequence of its inputs.
func lowerSequenceConstruct(c *nodeCtx) (*val, error) {
	seq := make([]*val, len(c.n.Inputs))
	for i := range c.n.Inputs {
		e, err := c.tensorVal(i)
		if err != nil {
			return nil, err
		}
		seq[i] = e
	}
	return &val{seq: seq}, nil
}

// SequenceLength(seq): an i64 scalar, known at compile time.
func lowerSequenceLength(c *nodeCtx) (*val, error) {
	seq, err := c.seqIn(0)
	if err != nil {
		return nil, err
	}
	return &val{c: tensor.Scalar(tensor.I64, float64(len(seq)))}, nil
}

// SequenceInsert(seq, x, position?): x inserted before position (appended without one).
func lowerSequenceInsert(c *nodeCtx) (*val, error) {
	seq, err := c.seqIn(0)
	if err != nil {
		return nil, err
	}
	x, err := c.tensorVal(1)
	if err != nil {
		return nil, err
	}
	p, err := c.position(2, len(seq), true, len(seq))
	if err != nil {
		return nil, err
	}
	out := append(append(append([]*val(nil), seq[:p]...), x), seq[p:]...)
	return &val{seq: out}, nil
}

// SequenceErase(seq, position?): seq without the element at position (the last without one).
func lowerSequenceErase(c *nodeCtx) (*val, error) {
	seq, err := c.seqIn(0)
	if err != nil {
		return nil, err
	}
	if len(seq) == 0 {
		return nil, fmt.Errorf("erasing from an empty sequence")
	}
	p, err := c.position(1, len(seq), false, len(seq)-1)
	if err != nil {
		return nil, err
	}
	return &val{seq: append(append([]*val(nil), seq[:p]...), seq[p+1:]...)}, nil
}

// ConcatFromSequence(seq) {axis, new_axis}: the elements concatenated along axis,
// or stacked along a new axis.
func lowerConcatFromSequence(c *nodeCtx) (*val, error) {
	seq, err := c.seqIn(0)
	if err != nil {
		return nil, err
	}
	if len(seq) == 0 {
		return nil, fmt.Errorf("concatenating an empty sequence")
	}
	axis, stack := c.aInt("axis", 0), c.aInt("new_axis", 0) == 1
	args := make([]*ir.Value, len(seq))
	for i, e := range seq {
		v, err := c.l.valueOf(c.b, e)
		if err != nil {
			return nil, err
		}
		if stack {
			rank := v.Type.Rank() + 1
			ax, err := ir.AxisIndex(axis, rank)
			if err != nil {
				return nil, err
			}
			shape := append(append(append([]int64(nil), v.Type.Shape[:ax]...), 1), v.Type.Shape[ax:]...)
			v = c.b.Reshape(v, shape...)
		}
		args[i] = v
	}
	if len(args) == 1 {
		return &val{v: args[0]}, nil
	}
	return &val{v: c.b.Apply1(ir.OpConcat, ir.A("axis", axis), args...)}, nil
}
