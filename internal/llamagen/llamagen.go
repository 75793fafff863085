// Package llamagen builds Llama-style decoder graphs of any size in IR, as the
// ONNX importer and match-attention make them from a torch.export of such a model
// (testdata/onnx/llama_mini.onnx has the same ops at small dims): RMSNorm, RoPE by
// slices and concat, causal attention, SwiGLU, an untied head. Weights carry no
// data, so a graph of the 221M-parameter flagship costs no host memory; it is for
// planning (memory, FLOPs, codegen), not for running. Only tests and tools use it.
package llamagen

import (
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Config is the model's architecture and the bound batch and sequence length.
type Config struct {
	Dim, Layers, Heads, FFN, Vocab int64
	Batch, SeqLen                  int64
	// Fused is flagship.py's layout: one qkv projection split into q, k and v
	// [B,T,H,D], RoPE in that layout, one w13 projection chunked into the gate
	// and the up projection. Unfused is llama_mini's: wq, wk, wv, w1, w3, and
	// RoPE on [B,H,T,D].
	Fused bool
	// RoPEBase is the rotary embeddings' base (0: 10000, as flagship.py and
	// Llama 2 have it).
	RoPEBase float64
}

// Flagship is ../shared/bench/flagship.py's model: d 1024, 12 layers, 8 heads of
// 128, SwiGLU 2816, vocabulary 32768, untied head (221,275,136 parameters).
func Flagship(seq int64) Config {
	return Config{Dim: 1024, Layers: 12, Heads: 8, FFN: 2816, Vocab: 32768, Batch: 1, SeqLen: seq, Fused: true}
}

// Params is the number of parameters of c's model.
func (c Config) Params() int64 {
	perLayer := 4*c.Dim*c.Dim + 3*c.FFN*c.Dim + 2*c.Dim
	return 2*c.Vocab*c.Dim + c.Layers*perLayer + c.Dim
}

// Build returns the forward graph: input "input_ids" i64[batch,seq], label
// "labels" i64[batch,seq] and output "logits" f32[batch,seq,vocab].
func Build(c Config) (*ir.Func, error) {
	if c.Dim%c.Heads != 0 || (c.Dim/c.Heads)%2 != 0 {
		return nil, fmt.Errorf("llamagen: dim %d over %d heads", c.Dim, c.Heads)
	}
	b := ir.NewBuilder("main_graph")
	f := b.Func()
	B, T, d, H := c.Batch, c.SeqLen, c.Dim, c.Heads
	D := d / H
	seqT := ir.T(tensor.I64, B, T)
	seqT.Labels = []string{"batch", "seq"}
	ids := b.Input("input_ids", seqT)
	w := func(name string, shape ...int64) *ir.Value {
		return f.AddParam(name, ir.RoleWeight, ir.T(tensor.F32, shape...), nil)
	}
	emb := "tok.weight"
	if c.Fused {
		emb = "emb.weight"
	}
	tok := w(emb, c.Vocab, d)
	type layer struct{ n1, n2, wq, wk, wv, wo, w1, w3, w2, qkv, w13 *ir.Value }
	ls := make([]layer, c.Layers)
	for i := range ls {
		p := fmt.Sprintf("blocks.%d.", i)
		ls[i].n1, ls[i].n2 = w(p+"n1.weight", d), w(p+"n2.weight", d)
	}
	norm := w("norm.weight", d)
	for i := range ls {
		p := fmt.Sprintf("blocks.%d.", i)
		l := &ls[i]
		if c.Fused {
			l.qkv, l.wo = w(p+"qkv.weight", 3*d, d), w(p+"o.weight", d, d)
			l.w13, l.w2 = w(p+"w13.weight", 2*c.FFN, d), w(p+"w2.weight", d, c.FFN)
			continue
		}
		l.wq, l.wk, l.wv, l.wo = w(p+"wq.weight", d, d), w(p+"wk.weight", d, d),
			w(p+"wv.weight", d, d), w(p+"wo.weight", d, d)
		l.w1, l.w3, l.w2 = w(p+"w1.weight", c.FFN, d), w(p+"w3.weight", c.FFN, d), w(p+"w2.weight", d, c.FFN)
	}
	head := w("head.weight", c.Vocab, d)
	b.Label("labels", seqT)

	k := 0
	name := func(s string) { b.SetName(fmt.Sprintf("node_%s_%d", s, k)); k++ }
	name("embedding")
	x := b.Apply1(ir.OpGather, ir.A("axis", int64(0)), tok, ids)
	two := b.Scalar(tensor.F32, 2)
	eps := b.Scalar(tensor.F32, 1e-6)
	rms := func(x, g *ir.Value) *ir.Value {
		name("pow")
		m := b.Apply1(ir.OpReduceMean, ir.A("axes", []int64{-1}, "keepdims", true), b.Apply1(ir.OpPow, nil, x, two))
		name("rsqrt")
		r := b.Unary(ir.OpRecip, b.Unary(ir.OpSqrt, b.Add(m, eps)))
		name("mul")
		return b.Mul(b.Mul(x, r), g)
	}
	// RoPE tables [T, D/2] from the positions, as flagship.py and HF Llama
	// compute them.
	name("rope")
	pos := b.Apply1(ir.OpRange, ir.A("start", 0.0, "delta", 1.0, "count", T, "dtype", tensor.F32))
	base := c.RoPEBase
	if base == 0 {
		base = 10000
	}
	freq := make([]float64, D/2)
	for i := range freq {
		freq[i] = math.Pow(base, -2*float64(i)/float64(D))
	}
	ang := b.Mul(b.Reshape(pos, T, 1), b.Const(tensor.FromFloats(tensor.F32, []int64{1, D / 2}, freq)))
	cos, sin := b.Unary(ir.OpCos, ang), b.Unary(ir.OpSin, ang)
	if c.Fused { // [1,T,1,D/2] against [B,T,H,D/2]
		cos, sin = b.Reshape(cos, 1, T, 1, D/2), b.Reshape(sin, 1, T, 1, D/2)
	}
	slice := func(x *ir.Value, axis, from, to int64) *ir.Value {
		return b.Apply1(ir.OpSlice, ir.A("axes", []int64{axis}, "starts", []int64{from}, "ends", []int64{to},
			"steps", []int64{1}), x)
	}
	rotate := func(t *ir.Value) *ir.Value { // t [.., D]: rotate the halves of the last axis
		name("slice")
		x1, x2 := slice(t, 3, 0, D/2), slice(t, 3, D/2, D)
		name("rot")
		r1 := b.Sub(b.Mul(x1, cos), b.Mul(x2, sin))
		r2 := b.Add(b.Mul(x1, sin), b.Mul(x2, cos))
		name("cat")
		return b.Apply1(ir.OpConcat, ir.A("axis", int64(-1)), r1, r2)
	}
	scale := 1 / math.Sqrt(float64(D))
	for _, l := range ls {
		h := rms(x, l.n1)
		var q, kk, v *ir.Value
		if c.Fused {
			name("linear")
			qkv := b.Reshape(b.MatMul(h, l.qkv, false, true), B, T, 3, H, D)
			name("unbind")
			parts := b.Apply(ir.OpSplit, ir.A("axis", int64(2), "sizes", []int64{1, 1, 1}), qkv)
			q, kk, v = b.Reshape(parts[0], B, T, H, D), b.Reshape(parts[1], B, T, H, D), b.Reshape(parts[2], B, T, H, D)
			q, kk = rotate(q), rotate(kk)
		} else {
			name("linear")
			q = b.Transpose(rotate(b.Transpose(b.Reshape(b.MatMul(h, l.wq, false, true), B, T, H, D), 0, 2, 1, 3)), 0, 2, 1, 3)
			name("linear")
			kk = b.Transpose(rotate(b.Transpose(b.Reshape(b.MatMul(h, l.wk, false, true), B, T, H, D), 0, 2, 1, 3)), 0, 2, 1, 3)
			name("linear")
			v = b.Reshape(b.MatMul(h, l.wv, false, true), B, T, H, D)
		}
		name("scaled_dot_product_attention")
		o, _ := b.Attention(q, kk, v, true, scale)
		name("linear")
		x = b.Add(x, b.MatMul(b.Reshape(o, B, T, d), l.wo, false, true))
		h = rms(x, l.n2)
		var g, u *ir.Value
		if c.Fused {
			name("linear")
			gu := b.Apply(ir.OpSplit, ir.A("axis", int64(-1), "sizes", []int64{c.FFN, c.FFN}),
				b.MatMul(h, l.w13, false, true))
			g, u = gu[0], gu[1]
		} else {
			name("linear")
			g = b.MatMul(h, l.w1, false, true)
			name("linear")
			u = b.MatMul(h, l.w3, false, true)
		}
		name("silu")
		g = b.Mul(g, b.Unary(ir.OpSigmoid, g))
		name("linear")
		x = b.Add(x, b.MatMul(b.Mul(g, u), l.w2, false, true))
	}
	h := rms(x, norm)
	name("linear")
	b.Output("logits", b.MatMul(h, head, false, true))
	return b.Build()
}
