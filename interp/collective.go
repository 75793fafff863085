package interp

import (
	"fmt"
	"slices"

	"github.com/lcc-dev/lcc/collective"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// The collectives of sharded programs (ir/ops_collective.go), run through
// Options.Comm: in tests an in-process world whose ranks are goroutines, so
// that a program sharded over N ranks is checked on one host against its
// unsharded form. Every collective moves float64, integers included (exact
// below 2^53), so one Communicator interface serves every dtype.
func init() {
	Register(ir.OpAllGather, kernelAllGather)
	Register(ir.OpReduceScatter, kernelReduceScatter)
	Register(ir.OpAllReduce, kernelAllReduce)
	Register(ir.OpAllToAll, kernelAllToAll)
	Register(ir.OpRingShift, kernelRingShift)
	Register(ir.OpShardPositions, kernelShardPositions)
}

// soloComm is the communicator of a run without one: a world of one rank, so a
// program sharded for ranks=1 runs as is.
type soloComm struct{}

// Every collective of a world of one rank is the identity; each returns a
// copy, since the caller may own and reuse what it sent.
func (soloComm) Rank() int { return 0 }
func (soloComm) Size() int { return 1 }
func (soloComm) AllGather(_ string, _ []int64, x []float64) ([][]float64, error) {
	return [][]float64{slices.Clone(x)}, nil
}
func (soloComm) AllToAll(_ string, parts [][]float64) ([][]float64, error) {
	return [][]float64{slices.Clone(parts[0])}, nil
}
func (soloComm) SendRecv(_ string, x []float64, _, _ int) ([]float64, error) {
	return slices.Clone(x), nil
}
func (soloComm) AllReduce(_ string, _ []int64, x []float64, _ string) ([]float64, error) {
	return slices.Clone(x), nil
}
func (soloComm) ReduceScatter(_ string, parts [][]float64, _ string) ([]float64, error) {
	return slices.Clone(parts[0]), nil
}

// commFor returns the communicator for node n and checks that its world has the
// node's ranks.
func commFor(n *ir.Node, opts Options) (collective.Communicator, error) {
	c := opts.Comm
	if c == nil {
		c = soloComm{}
	}
	// A program sharded for N ranks computes the wrong thing on any other world
	// (each rank's block would be the wrong share), so a mismatch is an error,
	// never a silent run.
	if r := ir.Ranks(n); r != c.Size() {
		if opts.Comm == nil {
			return nil, fmt.Errorf("sharded for %d ranks, but the run has no communicator "+
				"(set interp.Options.Comm)", r)
		}
		return nil, fmt.Errorf("sharded for %d ranks, but the communicator has %d", r, c.Size())
	}
	return c, nil
}

// opName identifies n in collective errors.
func opName(n *ir.Node) string { return n.Where() }

// floatsOf returns t's elements as float64 (integers converted exactly up to 2^53).
func floatsOf(t *tensor.Tensor) []float64 {
	// Float data is already float64 and is sent as is: no copy.
	if t.DType.IsFloat() {
		return t.F
	}
	out := make([]float64, len(t.I))
	for i, v := range t.I {
		out[i] = float64(v)
	}
	return out
}

// tensorOf builds n's result i from float64 data.
func tensorOf(n *ir.Node, i int, data []float64) *tensor.Tensor {
	t := n.Results[i].Type
	out := &tensor.Tensor{DType: t.DType, Shape: append([]int64{}, t.Shape...)}
	if t.DType.IsFloat() {
		out.F = data
	} else {
		out.I = make([]int64, len(data))
		for j, v := range data {
			// Integer data came as float64 from floatsOf, exact for |v| ≤ 2^53: the
			// conversion back is exact, and WrapInt applies the dtype's width.
			out.I[j] = tensor.WrapInt(int64(v), t.DType)
		}
	}
	return out
}

// splitBlocks cuts x (of shape) into n equal blocks along axis.
func splitBlocks(x []float64, shape []int64, axis, n int) [][]float64 {
	outer, size, inner := tensor.SplitAxis(shape, axis)
	// The verifier checked that size divides by n (the op's Infer).
	m := size / n
	out := make([][]float64, n)
	for j := range n {
		blk := make([]float64, 0, outer*m*inner)
		// Block j along axis is, for every outer index, the contiguous run of m·inner
		// elements at j·m: one append per outer index.
		for o := range outer {
			base := (o*size + j*m) * inner
			blk = append(blk, x[base:base+m*inner]...)
		}
		out[j] = blk
	}
	return out
}

// concatBlocks joins blocks of shape (each with size m along axis) along axis.
func concatBlocks(blocks [][]float64, shape []int64, axis int) []float64 {
	outer, m, inner := tensor.SplitAxis(shape, axis)
	out := make([]float64, 0, outer*m*inner*len(blocks))
	for o := range outer {
		for _, b := range blocks {
			out = append(out, b[o*m*inner:(o+1)*m*inner]...)
		}
	}
	return out
}

// axisOf is n's axis attribute name made non-negative; the verifier checked it
// is in range, so the error cannot happen here.
func axisOf(n *ir.Node, name string, rank int) int {
	ax, _ := ir.AxisIndex(n.AttrInt(name), rank)
	return ax
}

// kernelAllGather concatenates every rank's x along axis, in rank order, so
// each rank holds the same whole tensor.
func kernelAllGather(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	c, err := commFor(n, opts)
	if err != nil {
		return nil, err
	}
	x := args[0]
	// The shape travels with the data so that a rank with a different shape is
	// refused by the communicator (shapes must agree), not read as garbage.
	parts, err := c.AllGather(opName(n), x.Shape, floatsOf(x))
	if err != nil {
		return nil, err
	}
	return one(tensorOf(n, 0, concatBlocks(parts, x.Shape, axisOf(n, "axis", len(x.Shape))))), nil
}

// kernelReduceScatter gives rank r the sum over ranks of block r of x along
// axis. It is an all-to-all then a local sum in rank order, not a tree, so
// every rank adds the same numbers in the same order and the bits agree with a
// GPU's rank-ordered reduction.
func kernelReduceScatter(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	c, err := commFor(n, opts)
	if err != nil {
		return nil, err
	}
	x := args[0]
	blocks := splitBlocks(floatsOf(x), x.Shape, axisOf(n, "axis", len(x.Shape)), c.Size())
	got, err := c.AllToAll(opName(n), blocks)
	if err != nil {
		return nil, err
	}
	sum := make([]float64, len(blocks[0]))
	for s, g := range got { // rank order: every rank adds in the same order
		if len(g) != len(sum) {
			return nil, fmt.Errorf("rank %d sent %d elements, rank %d expects %d", s, len(g), c.Rank(),
				len(sum))
		}
		for i, v := range g {
			sum[i] += v
		}
	}
	return one(tensorOf(n, 0, sum)), nil
}

// kernelAllReduce combines x over ranks (sum, max or min). It gathers every
// rank's copy and reduces in rank order, for the same reason: a fixed order
// of additions makes every rank's result, and every run's, the same bits.
func kernelAllReduce(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	c, err := commFor(n, opts)
	if err != nil {
		return nil, err
	}
	x := args[0]
	parts, err := c.AllGather(opName(n), x.Shape, floatsOf(x))
	if err != nil {
		return nil, err
	}
	// Start from rank 0's copy and fold the others in rank order: the same
	// additions, in the same order, on every rank.
	red := n.AttrString("op")
	out := slices.Clone(parts[0])
	for _, p := range parts[1:] {
		for i, v := range p {
			switch red {
			case "max":
				out[i] = max(out[i], v)
			case "min":
				out[i] = min(out[i], v)
			default:
				out[i] += v
			}
		}
	}
	return one(tensorOf(n, 0, out)), nil
}

// kernelAllToAll is Ulysses' exchange: x is cut into Size blocks along
// split_axis, block s goes to rank s, and the blocks received are joined
// along concat_axis ([B, T/N, H, D] becomes [B, T, H/N, D]).
func kernelAllToAll(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	c, err := commFor(n, opts)
	if err != nil {
		return nil, err
	}
	x := args[0]
	r := len(x.Shape)
	sa, ca := axisOf(n, "split_axis", r), axisOf(n, "concat_axis", r)
	blocks := splitBlocks(floatsOf(x), x.Shape, sa, c.Size())
	got, err := c.AllToAll(opName(n), blocks)
	if err != nil {
		return nil, err
	}
	bshape := append([]int64{}, x.Shape...)
	// Each received block has x's shape with split_axis cut N ways; the blocks
	// from the N ranks are then joined along concat_axis in rank order.
	bshape[sa] /= int64(c.Size())
	for s, g := range got {
		if len(g) != len(blocks[0]) {
			return nil, fmt.Errorf("rank %d sent a block of %d elements, rank %d expects %v = %d", s,
				len(g), c.Rank(), bshape, len(blocks[0]))
		}
	}
	return one(tensorOf(n, 0, concatBlocks(got, bshape, ca))), nil
}

// kernelRingShift sends x to the rank shift places ahead and receives from
// the one shift places behind: one step of ring attention's k/v rotation.
func kernelRingShift(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	c, err := commFor(n, opts)
	if err != nil {
		return nil, err
	}
	x := args[0]
	size := c.Size()
	// A shift of N or more wraps; the +size keeps the remainders non-negative for
	// a negative shift.
	s := int(n.AttrInt("shift")) % size
	dst, src := (c.Rank()+s+size)%size, (c.Rank()-s+size)%size
	y, err := c.SendRecv(opName(n), floatsOf(x), dst, src)
	if err != nil {
		return nil, err
	}
	if len(y) != len(x.F)+len(x.I) {
		return nil, fmt.Errorf("rank %d sent %d elements, rank %d expects %d", src, len(y), c.Rank(),
			len(x.F)+len(x.I))
	}
	return one(tensorOf(n, 0, y)), nil
}

// kernelShardPositions lists this rank's global positions (see ir.LayoutPositions),
// expanded over the outer and inner factors of a merged axis.
func kernelShardPositions(n *ir.Node, _ []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	c, err := commFor(n, opts)
	if err != nil {
		return nil, err
	}
	total := n.AttrInt("total")
	outer, inner := n.AttrInt("outer"), n.AttrInt("inner")
	pos := ir.LayoutPositions(n.AttrString("layout"), total, int64(c.Size()),
		int64(c.Rank()))
	out := newResult(n, 0)
	// The positions form [outer, local, inner]: a merged axis (e.g. batch·seq
	// flattened) repeats this rank's positions for each outer index, with inner
	// consecutive elements per position.
	i := 0
	for o := range outer {
		for _, p := range pos {
			for k := range inner {
				out.I[i] = (o*total+p)*inner + k
				i++
			}
		}
	}
	return one(out), nil
}
