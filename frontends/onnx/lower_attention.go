package onnx

import (
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// explicitAttention reports whether an ONNX Attention node needs what lcc's fused
// attention op does not express: a KV cache (past_key/past_value, and the
// present_key/present_value outputs), a softcap, the qk_matmul_output output, or a
// value head size other than the query's, and (opsets 24, 25) nonpad_kv_seqlen or a
// sliding window other than fusedWindow's. Such nodes lower to the computation
// itself (matmul, softmax, matmul), which autodiff and the CPU run like any other;
// the passes then see no attention op to fuse or shard.
func explicitAttention(c *nodeCtx) bool {
	if _, ok := fusedWindow(c); !ok || c.has(4) || c.has(5) || c.has(6) || c.aFloat("softcap", 0) != 0 {
		return true
	}
	for i := 1; i < 4; i++ {
		if c.usedLater(i) {
			return true
		}
	}
	q, v := c.in(0), c.in(2)
	if q.Type.Rank() == 4 && v.Type.Rank() == 4 {
		return q.Type.Shape[3] != v.Type.Shape[3]
	}
	if q.Type.Rank() == 3 && v.Type.Rank() == 3 {
		qh, kvh := c.aInt("q_num_heads", 0), c.aInt("kv_num_heads", 0)
		return qh > 0 && kvh > 0 && q.Type.Shape[2]*kvh != v.Type.Shape[2]*qh
	}
	return false
}

// fusedWindow reads the window attributes of an Attention node as the fused op's
// sliding window (ir/window.go). Query i sees key j when i − left ≤ j ≤ i + right
// (the explicit lowering's rule without a cache), so under is_causal, which already
// hides j > i, any right bound changes nothing and left is a window of W = left + 1
// keys. W is 0 without a left bound or when no key falls outside it (W ≥ T). ok is
// false when the node has window attributes the op does not take that way: not
// causal, with attn_mask (kept as the reference computes it), or with more keys
// than queries (a cache).
func fusedWindow(c *nodeCtx) (w int64, ok bool) {
	left, right := c.aInt("left_window_size", -1), c.aInt("right_window_size", -1)
	if left < 0 && right < 0 {
		return 0, true
	}
	q, k := c.in(0).Type, c.in(1).Type
	if c.aInt("is_causal", 0) == 0 || c.has(3) || q.Rank() != k.Rank() || (q.Rank() != 3 && q.Rank() != 4) {
		return 0, false
	}
	seq := q.Rank() - 2 // T is axis 2 of [B,H,T,D] and axis 1 of [B,T,H·D]
	if q.Rank() == 3 {
		seq = 1
	}
	t := q.Shape[seq]
	if k.Shape[seq] != t {
		return 0, false
	}
	if left < 0 || left+1 >= t {
		return 0, true
	}
	return left + 1, true
}

// lowerAttentionExplicit lowers opset-23 Attention as ONNX's reference computes it:
// Q·Kᵀ·scale, then the softcap c·tanh(s/c), then the bias (the mask, true/false
// becoming 0/−inf, padded with −inf to the keys' length; causal: key j is visible
// to query i when j ≤ i + offset, offset the past length, or nonpad_kv_seqlen − Tq
// with an external cache; a window bounds j by i + offset − left and + right;
// nonpad_kv_seqlen hides the keys past it), softmax over the keys (0 on a row the
// bias hides entirely), and ·V. Keys and
// values are the past ones followed by the new; kv heads are repeated for grouped
// queries. qk_matmul_output_mode picks output 3: 0 and 1 the scaled (and capped)
// scores, 2 with the bias, 3 the softmax.
func lowerAttentionExplicit(c *nodeCtx) ([]*ir.Value, error) {
	b := c.b
	q, k, v := c.in(0), c.in(1), c.in(2)
	rank := q.Type.Rank()
	if k.Type.Rank() != rank || v.Type.Rank() != rank || (rank != 3 && rank != 4) {
		return nil, fmt.Errorf("Attention inputs %v, %v, %v: want all rank 3 or all rank 4", q.Type, k.Type, v.Type)
	}
	dt := q.Type.DType
	if !dt.IsFloat() {
		return nil, fmt.Errorf("Attention of %v", dt)
	}
	if rank == 3 {
		// [B, T, H·D] -> [B, H, T, D]
		split := func(x *ir.Value, heads int64, what string) (*ir.Value, error) {
			s := x.Type.Shape
			if heads <= 0 || s[2]%heads != 0 {
				return nil, fmt.Errorf("3-D Attention %s %v needs %s_num_heads dividing its last dim", what, x.Type, what[:1])
			}
			return b.Transpose(b.Reshape(x, s[0], s[1], heads, s[2]/heads), 0, 2, 1, 3), nil
		}
		var err error
		if q, err = split(q, c.aInt("q_num_heads", 0), "q"); err != nil {
			return nil, err
		}
		kvh := c.aInt("kv_num_heads", 0)
		if k, err = split(k, kvh, "kv"); err != nil {
			return nil, err
		}
		if v, err = split(v, kvh, "kv"); err != nil {
			return nil, err
		}
	}
	past := int64(0)
	if c.has(4) {
		pk := c.in(4)
		if pk.Type.Rank() != 4 {
			return nil, fmt.Errorf("Attention past_key %v: want rank 4", pk.Type)
		}
		past = pk.Type.Shape[2]
		k = b.Apply1(ir.OpConcat, ir.A("axis", 2), pk, k)
	}
	if c.has(5) {
		v = b.Apply1(ir.OpConcat, ir.A("axis", 2), c.in(5), v)
	}
	presentK, presentV := k, v
	qs, ks, vs := q.Type.Shape, k.Type.Shape, v.Type.Shape
	hq, hkv, tq, tk, d := qs[1], ks[1], qs[2], ks[2], qs[3]
	if ks[3] != d || vs[1] != hkv || vs[2] != tk || ks[0] != qs[0] || vs[0] != qs[0] {
		return nil, fmt.Errorf("Attention: q %v, k %v and v %v do not fit", q.Type, k.Type, v.Type)
	}
	if hq != hkv {
		if hkv <= 0 || hq%hkv != 0 {
			return nil, fmt.Errorf("Attention: %d query heads are not a multiple of %d kv heads", hq, hkv)
		}
		g := hq / hkv
		rep := func(x *ir.Value) *ir.Value { // [B, Hkv, T, D] -> [B, Hkv·g, T, D], each head g times
			s := x.Type.Shape
			x = b.Expand(b.Reshape(x, s[0], s[1], 1, s[2], s[3]), s[0], s[1], g, s[2], s[3])
			return b.Reshape(x, s[0], s[1]*g, s[2], s[3])
		}
		k, v = rep(k), rep(v)
	}
	scale := 1 / math.Sqrt(float64(d))
	if _, ok := c.attr("scale"); ok {
		scale = c.aFloat("scale", 0)
	}
	s := b.Mul(b.MatMul(q, k, false, true), b.Scalar(dt, scale))
	if sc := c.aFloat("softcap", 0); sc > 0 {
		s = b.Mul(b.Unary(ir.OpTanh, b.Mul(s, b.Scalar(dt, 1/sc))), b.Scalar(dt, sc))
	}
	qk := s
	var bias *ir.Value
	if c.has(3) {
		m := c.in(3)
		if m.Type.Rank() == 0 {
			return nil, fmt.Errorf("Attention attn_mask %v: want rank >= 1", m.Type)
		}
		if n := m.Type.Shape[m.Type.Rank()-1]; n < tk {
			ps := append([]int64{}, m.Type.Shape...)
			ps[len(ps)-1] = tk - n
			hide := 0.0 // a bool mask hides with false
			if m.Type.DType.IsFloat() {
				hide = math.Inf(-1)
			}
			m = b.Apply1(ir.OpConcat, ir.A("axis", -1), m, b.Full(ir.T(m.Type.DType, ps...), hide))
		}
		switch {
		case m.Type.DType == tensor.Bool:
			m = b.Apply1(ir.OpWhere, nil, m, b.Scalar(dt, 0), b.Scalar(dt, math.Inf(-1)))
		case m.Type.DType != dt:
			m = b.Cast(m, dt)
		}
		bias = m
	}
	var nonpad []int64
	if c.has(6) {
		// The valid keys per batch: a shape-deciding input, bound to its given value.
		var err error
		if nonpad, err = c.constInts(6); err != nil {
			return nil, err
		}
		if int64(len(nonpad)) != qs[0] {
			return nil, fmt.Errorf("Attention nonpad_kv_seqlen has %d values for batch %d", len(nonpad), qs[0])
		}
	}
	causal := c.aInt("is_causal", 0) != 0
	left, right := c.aInt("left_window_size", -1), c.aInt("right_window_size", -1)
	if causal || nonpad != nil || left >= 0 || right >= 0 {
		// Query i sits at p = offset + i: offset is the past length with a KV cache,
		// nonpad_kv_seqlen − Tq with an external cache, else 0. It sees key j when
		// j ≤ p (causal), p − left ≤ j ≤ p + right (windows) and j < nonpad.
		nb := int64(1)
		if nonpad != nil {
			nb = qs[0]
		}
		cm, err := tensor.Alloc(dt, nb, 1, tq, tk)
		if err != nil {
			return nil, fmt.Errorf("Attention's mask: %w", err)
		}
		for bi := int64(0); bi < nb; bi++ {
			off := past
			if !c.has(4) && nonpad != nil {
				off = nonpad[bi] - tq
			}
			for i := int64(0); i < tq; i++ {
				p := off + i
				for j := int64(0); j < tk; j++ {
					if causal && j > p || left >= 0 && j < p-left || right >= 0 && j > p+right ||
						nonpad != nil && j >= nonpad[bi] {
						cm.F[(bi*tq+i)*tk+j] = math.Inf(-1)
					}
				}
			}
		}
		if bias == nil {
			bias = b.Const(cm)
		} else {
			bias = b.Add(bias, b.Const(cm))
		}
	}
	if bias != nil {
		s = b.Add(s, bias)
	}
	mode := c.aInt("qk_matmul_output_mode", 0)
	if mode == 2 {
		qk = s
	}
	var p *ir.Value
	if bias != nil {
		// A row the mask hides entirely attends to nothing: its probabilities are 0
		// (not softmax's NaN, which would also poison the gradients).
		hidden := b.Apply1(ir.OpEq, nil, b.Apply1(ir.OpReduceMax, ir.A("axes", []int64{-1}, "keepdims", true), s),
			b.Scalar(dt, math.Inf(-1)))
		zero := b.Scalar(dt, 0)
		p = b.Apply1(ir.OpWhere, nil, hidden, zero, b.Softmax(b.Apply1(ir.OpWhere, nil, hidden, zero, s), -1))
	} else {
		p = b.Softmax(s, -1)
	}
	if mode == 3 {
		qk = p
	}
	if mode < 0 || mode > 3 {
		return nil, fmt.Errorf("Attention qk_matmul_output_mode=%d: want 0..3", mode)
	}
	y := b.MatMul(p, v, false, false)
	if rank == 3 {
		ys := y.Type.Shape
		y = b.Reshape(b.Transpose(y, 0, 2, 1, 3), ys[0], ys[2], ys[1]*ys[3])
	}
	return []*ir.Value{y, presentK, presentV, qk}, nil
}

// lowerRotaryEmbedding lowers opset-23 RotaryEmbedding as ONNX's reference: x
// ([B, H, S, D], or [B, S, H·D] with num_heads) is rotated on its first
// rotary_embedding_dim channels (all when 0) in pairs, halves or interleaved:
// (x1, x2) -> (cos·x1 − sin·x2, sin·x1 + cos·x2), with cos and sin the caches
// gathered at position_ids when given, else the caches themselves ([B, S, dim/2]).
func lowerRotaryEmbedding(c *nodeCtx) ([]*ir.Value, error) {
	b := c.b
	x := c.in(0)
	in := x.Type.Shape
	switch x.Type.Rank() {
	case 4:
		x = b.Transpose(x, 0, 2, 1, 3)
	case 3:
		nh := c.aInt("num_heads", 0)
		if nh <= 0 || in[2]%nh != 0 {
			return nil, fmt.Errorf("3-D RotaryEmbedding input %v needs num_heads dividing its last dim", x.Type)
		}
		x = b.Reshape(x, in[0], in[1], nh, in[2]/nh)
	default:
		return nil, fmt.Errorf("RotaryEmbedding input %v: want rank 3 or 4", x.Type)
	}
	s := x.Type.Shape // [B, S, H, D]
	d := s[3]
	rd := c.aInt("rotary_embedding_dim", 0)
	if rd == 0 {
		rd = d
	}
	if rd%2 != 0 || rd > d {
		return nil, fmt.Errorf("RotaryEmbedding rotary_embedding_dim %d for head size %d", rd, d)
	}
	half := rd / 2
	slice := func(v *ir.Value, start, end, step int64) *ir.Value {
		return b.Apply1(ir.OpSlice, ir.A("axes", []int64{3}, "starts", []int64{start}, "ends", []int64{end},
			"steps", []int64{step}), v)
	}
	rot := x
	if rd < d {
		rot = slice(x, 0, rd, 1)
	}
	cos, sin := c.in(1), c.in(2)
	if c.has(3) {
		pos := c.in(3)
		cos = b.Apply1(ir.OpGather, ir.A("axis", int64(0)), cos, pos)
		sin = b.Apply1(ir.OpGather, ir.A("axis", int64(0)), sin, pos)
	}
	if cos.Type.Rank() != 3 || cos.Type.Shape[2] != half || !cos.Type.Equal(sin.Type) {
		return nil, fmt.Errorf("RotaryEmbedding cos %v and sin %v: want [batch, seq, %d]", cos.Type, sin.Type, half)
	}
	cs := cos.Type.Shape
	cos, sin = b.Reshape(cos, cs[0], cs[1], 1, half), b.Reshape(sin, cs[0], cs[1], 1, half)
	var x1, x2 *ir.Value
	interleaved := c.aInt("interleaved", 0) != 0
	if interleaved {
		x1, x2 = slice(rot, 0, rd, 2), slice(rot, 1, rd, 2)
	} else {
		x1, x2 = slice(rot, 0, half, 1), slice(rot, half, rd, 1)
	}
	real := b.Sub(b.Mul(cos, x1), b.Mul(sin, x2))
	imag := b.Add(b.Mul(sin, x1), b.Mul(cos, x2))
	if interleaved {
		r4 := real.Type.Shape
		pair := b.Apply1(ir.OpConcat, ir.A("axis", int64(4)), b.Reshape(real, r4[0], r4[1], r4[2], r4[3], 1),
			b.Reshape(imag, r4[0], r4[1], r4[2], r4[3], 1))
		rot = b.Reshape(pair, r4[0], r4[1], r4[2], rd)
	} else {
		rot = b.Apply1(ir.OpConcat, ir.A("axis", int64(3)), real, imag)
	}
	out := rot
	if rd < d {
		out = b.Apply1(ir.OpConcat, ir.A("axis", int64(3)), rot, slice(x, rd, d, 1))
	}
	if len(in) == 3 {
		return one(b.Reshape(out, in...))
	}
	return one(b.Transpose(out, 0, 2, 1, 3))
}
