package exec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// scatterFunc is the embedding gradient: scatter_add of dy [n, d] by ids [n]
// into [v, d].
func scatterFunc(t testing.TB, n, d, v int64) *ir.Func {
	t.Helper()
	b := ir.NewBuilder("embed_grad")
	dy := b.Input("dy", ir.T(tensor.F32, n, d))
	ids := b.Input("ids", ir.T(tensor.I64, n))
	b.Output("dw", b.Apply1(ir.OpScatterAdd, ir.A("axis", 0, "size", v), dy, ids))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// scatterInputs draws ids with a skew (a third of them among eight hot rows, as
// frequent tokens are) and normal updates.
func scatterInputs(n, d, v int64, seed uint64) map[string]*tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, 5))
	dy, ids := tensor.New(tensor.F32, n, d), tensor.New(tensor.I64, n)
	for i := range dy.F {
		dy.F[i] = rng.NormFloat64()
	}
	for i := range ids.I {
		ids.I[i] = rng.Int64N(v)
		if i%3 == 0 {
			ids.I[i] = rng.Int64N(8)
		}
	}
	return map[string]*tensor.Tensor{"dy": dy, "ids": ids}
}

// TestGPUScatterAddSorted compares the sort-based scatter_add with the CPU on an
// embedding gradient with many tiles, a vocabulary past one radix digit and rows
// that no index names, in f32 and bf16; then runs it twice more and wants the
// same bits.
func TestGPUScatterAddSorted(t *testing.T) {
	dev := devicetest.Open(t)
	f := scatterFunc(t, 70000, 72, 5000)
	in := scatterInputs(70000, 72, 5000, 1)
	t.Run("f32", func(t *testing.T) { compare(t, dev, f, in, Options{}, 1e-5) })
	t.Run("bf16", func(t *testing.T) { compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2) })
	t.Run("bitwise", func(t *testing.T) {
		var first []float64
		for run := range 3 {
			out, err := RunWith(dev, f, in, Options{CacheDir: t.TempDir(), Poison: true})
			if err != nil {
				t.Fatal(err)
			}
			got := out["dw"].F
			if run == 0 {
				first = got
				continue
			}
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(first[i]) {
					t.Fatalf("run %d: dw[%d] = %v, first run %v", run, i, got[i], first[i])
				}
			}
		}
	})
}

// TestGPUMemboundSmall is a small fused cross-entropy (ragged row chunks, ignored
// rows, the vector and the scalar row paths) and a small sorted scatter_add, each
// against the CPU: the case compute-sanitizer runs.
func TestGPUMemboundSmall(t *testing.T) {
	dev := devicetest.Open(t)
	ig := int64(-100)
	for _, v := range []int64{40, 37} {
		f := flceFunc(t, 37, 16, v, ir.A("transpose_w", v == 40, "ignore_index", ig, "reduction", "mean",
			"chunk_rows", 16))
		in := flceInputs(f, v, &ig, 3)
		compare(t, dev, f, in, Options{}, 1e-5)
		compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2)
	}
	f := scatterFunc(t, 3000, 16, 300)
	in := scatterInputs(3000, 16, 300, 2)
	compare(t, dev, f, in, Options{}, 1e-5)
	compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2)
}
