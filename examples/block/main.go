// Command block builds a pre-norm transformer block with lcc's Go API, prints its
// IR, runs it on the CPU reference interpreter, and differentiates it.
//
//	go run ./examples/block
package main

import (
	"fmt"
	"log"
	"math"
	"math/rand/v2"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/tensor"
)

const (
	batch, seq, dim, heads, kvHeads, hidden = 2, 16, 32, 4, 2, 64
	headDim                                 = dim / heads
)

func randn(rng *rand.Rand, scale float64, shape ...int64) *tensor.Tensor {
	t := tensor.New(tensor.F32, shape...)
	for i := range t.F {
		t.F[i] = rng.NormFloat64() * scale
	}
	t.RoundTo(tensor.F32)
	return t
}

func main() {
	rng := rand.New(rand.NewPCG(1, 2))
	b := ir.NewBuilder("block")
	x := b.Input("x", ir.Type{DType: tensor.F32, Shape: []int64{batch, seq, dim},
		Labels: []string{"batch", "seq", ""}})
	w := func(name string, shape ...int64) *ir.Value {
		return b.Weight(name, randn(rng, 1/math.Sqrt(float64(shape[0])), shape...))
	}
	ones := tensor.New(tensor.F32, dim)
	for i := range ones.F {
		ones.F[i] = 1
	}

	// Attention with grouped-query heads: q has 4 heads, k and v share 2.
	h := b.Apply1(ir.OpRMSNorm, ir.A("axis", -1, "eps", 1e-5), x, b.Weight("attn_norm", ones))
	q := b.Reshape(b.MatMul(h, w("wq", dim, dim), false, false), batch, seq, heads, headDim)
	k := b.Reshape(b.MatMul(h, w("wk", dim, kvHeads*headDim), false, false), batch, seq, kvHeads, headDim)
	v := b.Reshape(b.MatMul(h, w("wv", dim, kvHeads*headDim), false, false), batch, seq, kvHeads, headDim)
	o, _ := b.Attention(q, k, v, true, 1/math.Sqrt(headDim))
	x1 := b.Add(x, b.MatMul(b.Reshape(o, batch, seq, dim), w("wo", dim, dim), false, false))

	// SwiGLU feed-forward.
	h2 := b.Apply1(ir.OpRMSNorm, ir.A("axis", -1, "eps", 1e-5), x1, b.Weight("ffn_norm", ones))
	gate := b.Unary(ir.OpSilu, b.MatMul(h2, w("w1", dim, hidden), false, false))
	up := b.MatMul(h2, w("w3", dim, hidden), false, false)
	y := b.Add(x1, b.MatMul(b.Mul(gate, up), w("w2", hidden, dim), false, false))
	b.Output("y", y)
	b.Output("loss", b.Apply1(ir.OpReduceMean, nil, b.Mul(y, y)))

	f, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(ir.Print(f))

	inputs := map[string]*tensor.Tensor{"x": randn(rng, 1, batch, seq, dim)}
	outs, err := interp.Run(f, inputs, interp.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\ny %v, loss %.6f\n", outs["y"].Shape, outs["loss"].F[0])

	g, err := autodiff.Grad(f, autodiff.Options{Loss: "loss", KeepOutputs: true})
	if err != nil {
		log.Fatal(err)
	}
	grads, err := interp.Run(g, inputs, interp.Options{})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range f.Params {
		if gt, ok := grads["grad."+p.Name]; ok {
			var n float64
			for _, v := range gt.F {
				n += v * v
			}
			fmt.Printf("‖grad %s‖ = %.6f\n", p.Name, math.Sqrt(n))
		}
	}
}
