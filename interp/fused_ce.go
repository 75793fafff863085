package interp

import (
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Fused linear cross-entropy is the loss head that never holds the [N, V]
// logits, as Liger Kernel's (Hsu et al., 2024) and Cut Cross-Entropy's
// (Wijmans et al., 2024) do: with a 150k vocabulary and long sequences the
// logits would be the largest tensor of the step. The interpreter keeps the
// same blocking so that its memory, like the GPU's, stays bounded.
func init() {
	Register(ir.OpFusedLinearCrossEntropy, kernelFLCE)
	Register(ir.OpFusedLinearCrossEntropyGrad, kernelFLCEGrad)
}

// flceRowBlock is the number of rows whose logits a fused cross-entropy kernel
// holds at once when the op has no chunk_rows attribute; flceVocabChunk is the
// number of vocabulary columns it computes at a time within those rows (the online
// log-sum-exp runs over them). The scratch is rows × flceVocabChunk, never [N, V].
const (
	// 32 rows × 4096 columns of float64 is a 1 MiB scratch whatever N and V are,
	// about one core's L2 cache.
	flceRowBlock   = 32
	flceVocabChunk = 4096
)

// flce holds the operands of a fused_linear_cross_entropy(_grad) node.
type flce struct {
	h, w      *tensor.Tensor
	labels    []int64
	n, d, v   int
	transpose bool
	// rows is the row chunk (the op's chunk_rows), chunk the vocabulary columns
	// computed at a time.
	rows, chunk int
	// keep[r] is false for rows whose label is ignore_index; counted is the rest.
	keep    []bool
	counted int
	// z is the scratch for one block of logits, rows × chunk.
	z []float64
}

// newFLCE reads the node's dims and attributes, checks every label once (a
// label out of range is bad data, an error naming the row), and allocates the
// one scratch block the kernels reuse.
func newFLCE(n *ir.Node, args []*tensor.Tensor) (*flce, error) {
	tw := n.AttrBool("transpose_w")
	rows, d, v, err := ir.FLCEDims(n.Args[0].Type, n.Args[1].Type, n.Args[2].Type, tw)
	if err != nil {
		return nil, err
	}
	rc := int(n.AttrInt("chunk_rows"))
	if rc <= 0 {
		rc = flceRowBlock
	}
	// Never more rows or columns than the problem has, and at least one, so that
	// the loops advance on empty inputs too.
	rc = max(1, min(rc, int(rows)))
	c := max(1, min(flceVocabChunk, int(v)))
	p := &flce{h: args[0], w: args[1], labels: args[2].I, n: int(rows), d: int(d), v: int(v),
		transpose: tw, rows: rc, chunk: c, keep: make([]bool, rows)}
	ignore, hasIgnore := n.Attrs.Get("ignore_index")
	// Rows labelled ignore_index (PyTorch's −100 by default) count neither in the
	// loss nor in the mean's denominator, as F.cross_entropy does.
	ign, _ := ignore.(int64)
	for r, l := range p.labels {
		if hasIgnore && l == ign {
			continue
		}
		if l < 0 || l >= v {
			return nil, fmt.Errorf("label %d of row %d out of range for %d classes", l, r, v)
		}
		p.keep[r] = true
		p.counted++
	}
	p.z = make([]float64, rc*c)
	return p, nil
}

// logits fills p.z[(r-r0)*(c1-c0) + (j-c0)] with (h·w)[r, j] for rows [r0, r1) and
// vocabulary columns [c0, c1), accumulating in float64.
func (p *flce) logits(r0, r1, c0, c1 int) {
	cw := c1 - c0
	z := p.z[:(r1-r0)*cw]
	// The [d, V] branch accumulates into z; the transposed one overwrites it.
	clear(z)
	h, w, d, v := p.h.F, p.w.F, p.d, p.v
	for r := r0; r < r1; r++ {
		zr := z[(r-r0)*cw : (r-r0+1)*cw]
		hr := h[r*d : (r+1)*d]
		if p.transpose { // w is [V, d]: a dot product per column
			for j := c0; j < c1; j++ {
				var s float64
				for k, hv := range hr {
					s += hv * w[j*d+k]
				}
				zr[j-c0] = s
			}
			continue
		}
		for k, hv := range hr { // w is [d, V]: rows of w scaled and added
			wk := w[k*v+c0 : k*v+c1]
			for j, wv := range wk {
				zr[j] += hv * wv
			}
		}
	}
}

// lse computes, for rows [r0, r1), the log-sum-exp of each row's logits and its
// target logit, visiting the vocabulary one chunk at a time with the online
// rescaling of Milakov and Gimelshein (running max m, running sum s of exp(z − m)).
func (p *flce) lse(r0, r1 int, lse, target []float64) {
	m := make([]float64, r1-r0)
	s := make([]float64, r1-r0)
	for i := range m {
		m[i] = math.Inf(-1)
	}
	for c0 := 0; c0 < p.v; c0 += p.chunk {
		c1 := min(c0+p.chunk, p.v)
		cw := c1 - c0
		p.logits(r0, r1, c0, c1)
		for r := r0; r < r1; r++ {
			i := r - r0
			if !p.keep[r] {
				continue
			}
			zr := p.z[i*cw : (i+1)*cw]
			mx := m[i]
			for _, x := range zr {
				mx = fmax(mx, x)
			}
			// A chunk whose running max is ±Inf has no finite rescaling: an all −Inf row
			// so far keeps s = 0, and +Inf makes the lse +Inf, below.
			if math.IsInf(mx, 0) {
				m[i] = mx
				continue
			}
			// The online rescaling: the sum so far, taken from the old max to the new
			// one, plus this chunk's terms.
			acc := s[i] * math.Exp(m[i]-mx)
			for _, x := range zr {
				acc += math.Exp(x - mx)
			}
			m[i], s[i] = mx, acc
			if l := int(p.labels[r]); l >= c0 && l < c1 {
				target[i] = zr[l-c0]
			}
		}
	}
	for i := range lse {
		lse[i] = m[i] + math.Log(s[i])
		if math.IsInf(m[i], 0) {
			lse[i] = m[i]
		}
	}
}

// kernelFLCE is fused_linear_cross_entropy: per row, logsumexp(h·w) − (h·w)[label],
// reduced as softmax_cross_entropy reduces (kernelLoss), without materialising the
// logits.
func kernelFLCE(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	p, err := newFLCE(n, args)
	if err != nil {
		return nil, err
	}
	out := newResult(n, 0)
	losses := make([]float64, p.n)
	lse := make([]float64, p.rows)
	target := make([]float64, p.rows)
	// Row blocks run one after another and losses are summed in row order, so
	// the result does not depend on the block size.
	for r0 := 0; r0 < p.n; r0 += p.rows {
		r1 := min(r0+p.rows, p.n)
		p.lse(r0, r1, lse[:r1-r0], target[:r1-r0])
		for r := r0; r < r1; r++ {
			if p.keep[r] {
				losses[r] = lse[r-r0] - target[r-r0]
			}
		}
	}
	switch n.AttrString("reduction") {
	case "none":
		copy(out.F, losses)
	case "sum":
		out.F[0] = sum(losses)
	// mean over the rows that count, PyTorch's reduction="mean".
	default:
		out.F[0] = sum(losses) / float64(p.counted)
	}
	return one(out), nil
}

// kernelFLCEGrad is fused_linear_cross_entropy_grad: for each chunk of rows it
// finds the log-sum-exp (one sweep over the vocabulary), then sweeps again,
// recomputing each chunk of logits, and accumulates G = c ⊙ (softmax − onehot)
// into dh += G·wᵀ and dw += hᵀ·G.
func kernelFLCEGrad(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	p, err := newFLCE(n, args)
	if err != nil {
		return nil, err
	}
	dloss := args[3].F
	dh, dw := newResult(n, 0), newResult(n, 1)
	weight := func(r int) float64 { // the cotangent of row r's loss
		switch n.AttrString("reduction") {
		case "none":
			return dloss[r]
		case "sum":
			return dloss[0]
		}
		return dloss[0] / float64(p.counted)
	}
	lse := make([]float64, p.rows)
	target := make([]float64, p.rows)
	d, v := p.d, p.v
	for r0 := 0; r0 < p.n; r0 += p.rows {
		r1 := min(r0+p.rows, p.n)
		// The backward recomputes the logits rather than keep them from the
		// forward, as the GPU's backward does; with the vocabulary chunked too that
		// is two sweeps, one for the lse and one for G.
		p.lse(r0, r1, lse[:r1-r0], target[:r1-r0])
		for c0 := 0; c0 < v; c0 += p.chunk {
			c1 := min(c0+p.chunk, v)
			cw := c1 - c0
			p.logits(r0, r1, c0, c1)
			for r := r0; r < r1; r++ {
				i := r - r0
				g := p.z[i*cw : (i+1)*cw]
				if !p.keep[r] {
					clear(g)
					continue
				}
				c := weight(r)
				for j := range g {
					// softmax = exp(z − lse): the lse from the first sweep makes each chunk's
					// softmax exact without the row's other chunks.
					g[j] = c * math.Exp(g[j]-lse[i])
				}
				if l := int(p.labels[r]); l >= c0 && l < c1 {
					g[l-c0] -= c
				}
			}
			// dh[r, k] += Σ_j G[r, j]·w(k, j); dw(k, j) += Σ_r h[r, k]·G[r, j].
			for r := r0; r < r1; r++ {
				if !p.keep[r] {
					continue
				}
				g := p.z[(r-r0)*cw : (r-r0+1)*cw]
				hr, dhr := p.h.F[r*d:(r+1)*d], dh.F[r*d:(r+1)*d]
				for k := 0; k < d; k++ {
					var s float64
					hv := hr[k]
					// dh and dw update in one pass over G so that each chunk of logits is read
					// once; dw's element (j, k) collects rows in row order, which fixes the sum's
					// order.
					if p.transpose {
						for j, gv := range g {
							s += gv * p.w.F[(c0+j)*d+k]
							dw.F[(c0+j)*d+k] += hv * gv
						}
					} else {
						wk, dwk := p.w.F[k*v+c0:k*v+c1], dw.F[k*v+c0:k*v+c1]
						for j, gv := range g {
							s += gv * wk[j]
							dwk[j] += hv * gv
						}
					}
					dhr[k] += s
				}
			}
		}
	}
	return []*tensor.Tensor{dh, dw}, nil
}
