package exec

import (
	"fmt"
	"math/rand/v2"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// flceFunc is fused_linear_cross_entropy and its gradient at dloss = seed:
// h [n, d], w [v, d] with transpose_w (as PyTorch's x @ W.t()) or [d, v].
func flceFunc(t testing.TB, n, d, v int64, attrs ir.Attrs) *ir.Func {
	t.Helper()
	b := ir.NewBuilder("ce")
	ws := []int64{d, v}
	if attrs.Bool("transpose_w") {
		ws = []int64{v, d}
	}
	h := b.Input("h", ir.T(tensor.F32, n, d))
	w := b.Input("w", ir.T(tensor.F32, ws...))
	y := b.Input("labels", ir.T(tensor.I64, n))
	loss := b.Apply1(ir.OpFusedLinearCrossEntropy, attrs, h, w, y)
	dl := b.Input("dloss", loss.Type)
	gr := b.Apply(ir.OpFusedLinearCrossEntropyGrad, attrs, h, w, y, dl)
	b.Output("loss", loss)
	b.Output("dh", gr[0])
	b.Output("dw", gr[1])
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// flceInputs are random: h normal, w small normal, labels uniform with every
// seventh row ignored (when ignore is set), dloss normal.
func flceInputs(f *ir.Func, v int64, ignore *int64, seed uint64) map[string]*tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, 11))
	in := map[string]*tensor.Tensor{}
	for _, p := range f.Params {
		x := tensor.New(p.Value.Type.DType, p.Value.Type.Shape...)
		for i := range x.F {
			x.F[i] = rng.NormFloat64()
			if p.Name == "w" {
				x.F[i] *= 0.3
			}
		}
		for i := range x.I {
			x.I[i] = rng.Int64N(v)
			if ignore != nil && i%7 == 3 {
				x.I[i] = *ignore
			}
		}
		in[p.Name] = x
	}
	return in
}

// TestGPUFusedCrossEntropy compares the chunked GPU fused cross-entropy and its
// gradient with the CPU interpreter: several row chunks with a ragged last one,
// ignored rows, every reduction, both layouts of w, f32 and bf16 storage, the
// 16-byte vector path (V a multiple of 8) and the scalar one.
func TestGPUFusedCrossEntropy(t *testing.T) {
	dev := devicetest.Open(t)
	ig := int64(-100)
	for _, c := range []struct {
		n, d, v int64
		attrs   ir.Attrs
		ignore  *int64
	}{
		{300, 64, 1024, ir.A("transpose_w", true, "ignore_index", ig, "reduction", "mean", "chunk_rows", 128), &ig},
		{300, 48, 1000, ir.A("ignore_index", ig, "reduction", "sum", "chunk_rows", 77), &ig},
		{257, 32, 520, ir.A("transpose_w", true, "reduction", "none", "chunk_rows", 100), nil},
		{130, 40, 333, ir.A("transpose_w", true, "ignore_index", ig, "reduction", "mean"), &ig},
	} {
		f := flceFunc(t, c.n, c.d, c.v, c.attrs)
		in := flceInputs(f, c.v, c.ignore, uint64(c.n))
		name := fmt.Sprintf("%dx%dx%d/%v", c.n, c.d, c.v, c.attrs)
		t.Run(name+"/f32", func(t *testing.T) { compare(t, dev, f, in, Options{SyncEach: true}, 1e-5) })
		t.Run(name+"/bf16", func(t *testing.T) { compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2) })
	}
}

// TestFLCEScratchBounded checks, without a GPU, that the fused cross-entropy's
// forward and backward at 1M tokens (d 1024, V 32768, bf16) plan at most 1 GiB of
// arena beyond their inputs and outputs (h, w, labels, loss, dh and dw), and that
// the plan never holds a [tokens, vocab] buffer.
func TestFLCEScratchBounded(t *testing.T) {
	const n, d, v = 1 << 20, 1024, 32768
	f := flceFunc(t, n, d, v, ir.A("transpose_w", true, "ignore_index", -100, "reduction", "mean"))
	p, err := codegen.Build(f, codegen.Options{Arch: "sm_90", Storage: tensor.BF16})
	if err != nil {
		t.Fatal(err)
	}
	_, peak := PlanArena(p.Plan)
	var io int64
	for _, b := range p.Plan.Buffers {
		if b.Kind == "param" {
			io += b.Bytes
		}
		if b.Bytes >= int64(n)*v {
			t.Errorf("buffer %%%d (%s) holds %d bytes: the whole logits", b.ID, b.Kind, b.Bytes)
		}
	}
	for _, o := range p.Plan.Outputs {
		io += p.Plan.Buffers[o.ID].Bytes
	}
	extra := peak - io
	t.Logf("arena %d MiB, inputs and outputs %d MiB, extra %d MiB", peak>>20, io>>20, extra>>20)
	if extra > 1<<30 {
		t.Fatalf("extra arena %d MiB > 1 GiB", extra>>20)
	}
}
