package passes

import (
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/tensor"
)

// TestBucketsKeepBits runs the step of testdata's buckets.txtar on 3 in-process
// ranks with different data, reduced per gradient and in buckets, and checks
// that every output is the same bits: bucketing moves data, it never changes a
// sum.
func TestBucketsKeepBits(t *testing.T) {
	ar, err := txtar.ParseFile("testdata/all-reduce-gradients/buckets.txtar")
	if err != nil {
		t.Fatal(err)
	}
	var src string
	for _, f := range ar.Files {
		if f.Name == "in.lcc" {
			src = string(f.Data)
		}
	}
	run := func(bucket int64) []map[string]*tensor.Tensor {
		f, err := ir.Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := AllReduceGradientsWith(f, AllReduceGradientsConfig{Ranks: 3, Prefix: "grad.",
			BucketBytes: bucket}); err != nil {
			t.Fatal(err)
		}
		outs := make([]map[string]*tensor.Tensor, 3)
		err = comm.NewWorld(3, 0).Run(func(e *comm.Endpoint) error {
			rng := rand.New(rand.NewPCG(uint64(e.Rank()), 1))
			in := map[string]*tensor.Tensor{}
			for _, p := range f.Params {
				x := tensor.New(p.Value.Type.DType, p.Value.Type.Shape...)
				for i := range x.F {
					x.F[i] = (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(6)-3))
				}
				in[p.Name] = x
			}
			o, err := interp.Run(f, in, interp.Options{Precision: tensor.F32, Comm: e})
			outs[e.Rank()] = o
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return outs
	}
	want, got := run(0), run(64)
	for r := range want {
		for name, w := range want[r] {
			g := got[r][name]
			for i := range w.F {
				if math.Float64bits(g.F[i]) != math.Float64bits(w.F[i]) {
					t.Fatalf("rank %d: %s[%d] = %v in buckets, %v alone", r, name, i, g.F[i], w.F[i])
				}
			}
		}
	}
}
