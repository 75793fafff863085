package exec

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/attntest"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/comm/devlocal"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// runRanks runs rank r's inputs ins[r] through f on GPU 0, every rank with its
// own session and a devlocal communicator of len(ins) ranks, outputs poisoned
// first, and returns every rank's outputs.
func runRanks(t *testing.T, f *ir.Func, ins []map[string]*tensor.Tensor, opts Options) []map[string]*tensor.Tensor {
	t.Helper()
	devicetest.Open(t)
	n := len(ins)
	dir := t.TempDir()
	cache, err := cuda.OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := devlocal.NewWorld(n, 3*time.Minute, cache)
	got := make([]map[string]*tensor.Tensor, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			dev, err := cuda.Open(0)
			if err != nil {
				errs[r] = err
				return
			}
			defer dev.Close()
			c, err := w.Comm(dev, r)
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			o := opts
			o.Comm, o.Poison, o.CacheDir = c, true, dir
			got[r], errs[r] = RunWith(dev, f, ins[r], o)
			if errs[r] != nil {
				w.Abort(errs[r])
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return got
}

// unsharded runs attention and its gradient over the whole sequence on the
// CPU: the reference of a sharded op. attrs are the forward's attributes
// (op decides which).
func unsharded(t *testing.T, op, grad ir.Op, attrs ir.Attrs, full map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	sq, skv := full["q"].Shape, full["k"].Shape
	f := attntest.Func(t, op, grad, attrs, sq[0], sq[1], sq[2], skv[2], sq[3])
	out, err := interp.Run(f, full, interp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// randomFull is random q, k, v, do of the whole sequence [B, T, H, D].
func randomFull(b, total, h, hkv, d int64, seed uint64) map[string]*tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, 11))
	mk := func(heads int64) *tensor.Tensor {
		x := tensor.New(tensor.F32, b, total, heads, d)
		for i := range x.F {
			x.F[i] = rng.NormFloat64()
		}
		return x
	}
	return map[string]*tensor.Tensor{"q": mk(h), "k": mk(hkv), "v": mk(hkv), "do": mk(h)}
}

// takeRows gathers positions pos of axis seqAxis of x.
func takeRows(x *tensor.Tensor, seqAxis int, pos []int64) *tensor.Tensor {
	shape := append([]int64{}, x.Shape...)
	total := shape[seqAxis]
	shape[seqAxis] = int64(len(pos))
	outer, inner := int64(1), int64(1)
	for i := range seqAxis {
		outer *= x.Shape[i]
	}
	for _, s := range x.Shape[seqAxis+1:] {
		inner *= s
	}
	y := tensor.New(x.DType, shape...)
	for o := range outer {
		for j, p := range pos {
			copy(y.F[(o*int64(len(pos))+int64(j))*inner:][:inner], x.F[(o*total+p)*inner:][:inner])
		}
	}
	return y
}

// runSharded runs f, one rank's program of case c, on every rank with its rows of
// the whole sequence's inputs full, and compares each rank's outputs with want,
// the unsharded ones, at its positions (1e-5 in f32, 2e-2 in bf16).
func runSharded(t *testing.T, c attntest.Ring, f *ir.Func, full, want map[string]*tensor.Tensor) {
	t.Helper()
	total := c.L * int64(c.Ranks)
	pos := func(r int) []int64 { return ir.LayoutPositions(c.Layout, total, int64(c.Ranks), int64(r)) }
	ins := make([]map[string]*tensor.Tensor, c.Ranks)
	for r := range ins {
		ins[r] = map[string]*tensor.Tensor{}
		for name, x := range full {
			ins[r][name] = takeRows(x, 1, pos(r))
		}
	}
	got := runRanks(t, f, ins, Options{Storage: c.Storage})
	tol := 1e-5
	if c.Storage == tensor.BF16 {
		tol = 2e-2
	}
	checkSharded(t, c.String(), got, want, pos, tol)
}

// checkSharded compares every rank's outputs with the unsharded reference at
// the rank's positions.
func checkSharded(t *testing.T, name string, got []map[string]*tensor.Tensor, want map[string]*tensor.Tensor,
	positions func(r int) []int64, tol float64) {
	t.Helper()
	for r := range got {
		pos := positions(r)
		for _, out := range []string{"o", "lse", "dq", "dk", "dv"} {
			axis := 1
			if out == "lse" {
				axis = 2
			}
			w := takeRows(want[out], axis, pos)
			if e := relErr(got[r][out], w); e > tol {
				t.Errorf("%s: rank %d: %s: relative error %.3g > %g (gpu %v, cpu %v)", name, r, out, e, tol,
					head(got[r][out]), head(w))
			}
		}
	}
}

// TestGPURingAttention runs ring attention and its gradient on 2 and 4 ranks
// sharing GPU 0 (runtime/comm/devlocal), in both tiers (bf16 head dims 64 and
// 128 on the tensor-core kernels; fp32, and bf16 head dim 32, on the scalar
// kernels with the fp32 merge), against the CPU interpreter's unsharded
// attention at each rank's positions.
func TestGPURingAttention(t *testing.T) {
	devicetest.Open(t)
	runShardCases(t, attntest.RingCases, 100, func(c attntest.Ring) attntest.Ring { return c },
		ir.OpAttention, ir.OpAttentionGrad,
		func(c attntest.Ring, scale float64) ir.Attrs { return ir.A("causal", c.Causal, "scale", scale) })
}

// runShardCases runs each case's rank program on random data (seeded from seed
// and the case's index) against the CPU interpreter's unsharded fwd and bwd ops
// with the attributes attrs gives.
func runShardCases[C interface {
	String() string
	RankFunc(testing.TB, float64) *ir.Func
}](t *testing.T, cases []C, seed uint64, ring func(C) attntest.Ring, fwd, bwd ir.Op,
	attrs func(C, float64) ir.Attrs) {
	const scale = 0.3
	for i, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			r := ring(c)
			full := randomFull(r.B, r.L*int64(r.Ranks), r.H, r.Hkv, r.D, seed+uint64(i))
			want := unsharded(t, fwd, bwd, attrs(c, scale), full)
			runSharded(t, r, c.RankFunc(t, scale), full, want)
		})
	}
}

// TestGPUShardedDilated runs LongNet's sharded dilated attention and its exact
// gradient on 2 and 4 ranks sharing GPU 0: local branches, far branches whose
// segment spans two ranks or the whole sequence (the sparse all-gather and the
// reduce-scatter of dk, dv), in both tiers and both head-offset rules, against
// the CPU interpreter's unsharded dilated attention at each rank's positions.
func TestGPUShardedDilated(t *testing.T) {
	devicetest.Open(t)
	runShardCases(t, attntest.DilatedCases, 200, func(c attntest.Dilated) attntest.Ring { return c.Ring },
		ir.OpDilatedAttention, ir.OpDilatedAttentionGrad, attntest.Dilated.Attrs)
}

// timingFunc is one rank's attention (op, grad) forward and backward on
// resident weights q, k, v, do, with the sums of o, dq, dk and dv as outputs, so
// that a timed run moves nothing between host and device but four scalars.
func timingFunc(t *testing.T, op, grad ir.Op, attrs ir.Attrs, in map[string]*tensor.Tensor) *ir.Func {
	t.Helper()
	bd := ir.NewBuilder("timing")
	q, k, v, do := bd.Weight("q", in["q"]), bd.Weight("k", in["k"]), bd.Weight("v", in["v"]), bd.Weight("do", in["do"])
	r := bd.Apply(op, attrs, q, k, v)
	gr := bd.Apply(grad, attrs, q, k, v, r[0], r[1], do)
	for i, x := range []*ir.Value{r[0], gr[0], gr[1], gr[2]} {
		bd.Output(fmt.Sprint("sum", i), bd.ReduceSum(x, false, 0, 1, 2, 3))
	}
	f, err := bd.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestGPURingTiming times ring attention's forward and backward (bf16, T=16K,
// H=8, D=128, causal, zigzag) on 2 and 4 ranks sharing GPU 0 against the
// unsharded attention, each after a warm-up run, inputs resident: on one GPU
// the ranks' blocks add up to the same FLOPs, so the ratio is the cost of the
// transfers, merges and layout copies (the ranks' kernels share the GPU). It
// checks nothing but that the runs succeed, and logs the times.
func TestGPURingTiming(t *testing.T) {
	devicetest.Open(t)
	const b, total, h, d, reps = 1, 16384, 8, 128, 3
	full := randomFull(b, total, h, h, d, 7)
	timeRanks := func(n int) time.Duration {
		at := ir.A("causal", true, "scale", 0.088)
		fs := make([]*ir.Func, n)
		for r := range fs {
			pos := ir.LayoutPositions(ir.LayoutZigzag, total, int64(n), int64(r))
			in := map[string]*tensor.Tensor{}
			for name, x := range full {
				in[name] = takeRows(x, 1, pos)
			}
			if n == 1 {
				fs[r] = timingFunc(t, ir.OpAttention, ir.OpAttentionGrad, at, full)
			} else {
				fs[r] = timingFunc(t, ir.OpRingAttention, ir.OpRingAttentionGrad,
					at.With("ranks", n).With("layout", ir.LayoutZigzag), in)
			}
		}
		dir := t.TempDir()
		cache, err := cuda.OpenCache(dir)
		if err != nil {
			t.Fatal(err)
		}
		w := devlocal.NewWorld(n, 3*time.Minute, cache)
		var ready, start sync.WaitGroup
		ready.Add(n)
		start.Add(1)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				errs[r] = timedRank(w, r, n, fs[r], dir, reps, &ready, &start)
				if errs[r] != nil {
					w.Abort(errs[r])
				}
			})
		}
		ready.Wait()
		t0 := time.Now()
		start.Done()
		wg.Wait()
		el := time.Since(t0) / reps
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%d ranks: rank %d: %v", n, r, err)
			}
		}
		return el
	}
	one := timeRanks(1)
	t.Logf("unsharded attention fwd+bwd, T=%d H=%d D=%d bf16 causal: %v a step", total, h, d, one)
	for _, n := range []int{2, 4} {
		el := timeRanks(n)
		t.Logf("ring attention on %d ranks sharing the GPU: %v a step, %.2fx the unsharded", n, el,
			float64(el)/float64(one))
	}
}

// timedRank is rank r of a timing run: a warm-up run, then reps runs once
// every rank is ready.
func timedRank(w *devlocal.World, r, n int, f *ir.Func, dir string, reps int, ready, start *sync.WaitGroup) error {
	warm := false
	defer func() {
		if !warm {
			ready.Done()
		}
	}()
	dev, err := cuda.Open(0)
	if err != nil {
		return err
	}
	defer dev.Close()
	c, err := w.Comm(dev, r)
	if err != nil {
		return err
	}
	defer c.Close()
	opts := Options{Storage: tensor.BF16, CacheDir: dir}
	if n > 1 {
		opts.Comm = c
	}
	s := NewSession(dev, opts)
	defer s.Close()
	if _, err := s.Run(f, nil); err != nil {
		return err
	}
	warm = true
	ready.Done()
	start.Wait()
	for range reps {
		if _, err := s.Run(f, nil); err != nil {
			return err
		}
	}
	return nil
}
