package exec

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/comm/devlocal"
	"github.com/lcc-dev/lcc/runtime/cpu"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// runRanks runs rank r's inputs ins[r] through f on GPU 0, every rank with its
// own session and a devlocal communicator of len(ins) ranks, outputs poisoned
// first, and returns every rank's outputs.
func runRanks(t *testing.T, f *ir.Func, ins []map[string]*tensor.Tensor, opts Options) []map[string]*tensor.Tensor {
	t.Helper()
	openGPU(t)
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

// ringCase is one shape of the sharded attention tests.
type ringCase struct {
	ranks           int
	b, l, h, hkv, d int64
	causal          bool
	layout          string
	storage         tensor.DType
}

func (c ringCase) String() string {
	return fmt.Sprintf("ranks=%d/B=%d,L=%d,H=%d/%d,D=%d,causal=%v,%s,%v", c.ranks, c.b, c.l, c.h, c.hkv, c.d,
		c.causal, c.layout, c.storage)
}

// unsharded runs attention and its gradient over the whole sequence on the
// CPU: the reference of a sharded op. attrs are the forward's attributes
// (op decides which).
func unsharded(t *testing.T, op, grad ir.Op, attrs ir.Attrs, full map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	b := ir.NewBuilder("unsharded")
	in := func(name string) *ir.Value { return b.Input(name, ir.T(tensor.F32, full[name].Shape...)) }
	q, k, v, do := in("q"), in("k"), in("v"), in("do")
	r := b.Apply(op, attrs, q, k, v)
	gr := b.Apply(grad, attrs, q, k, v, r[0], r[1], do)
	for i, name := range []string{"o", "lse", "dq", "dk", "dv"} {
		b.Output(name, append(r, gr...)[i])
	}
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cpu.Run(f, full, cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// shardedFunc is one rank's program: the sharded op and its gradient.
func shardedFunc(t *testing.T, op, grad ir.Op, attrs ir.Attrs, b, l, h, hkv, d int64) *ir.Func {
	t.Helper()
	bd := ir.NewBuilder("sharded")
	q := bd.Input("q", ir.T(tensor.F32, b, l, h, d))
	k := bd.Input("k", ir.T(tensor.F32, b, l, hkv, d))
	v := bd.Input("v", ir.T(tensor.F32, b, l, hkv, d))
	do := bd.Input("do", ir.T(tensor.F32, b, l, h, d))
	r := bd.Apply(op, attrs, q, k, v)
	gr := bd.Apply(grad, attrs, q, k, v, r[0], r[1], do)
	for i, name := range []string{"o", "lse", "dq", "dk", "dv"} {
		bd.Output(name, append(r, gr...)[i])
	}
	f, err := bd.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f
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
	openGPU(t)
	cases := []ringCase{
		{2, 1, 64, 2, 2, 64, true, ir.LayoutZigzag, tensor.BF16},
		{4, 2, 64, 4, 2, 128, true, ir.LayoutZigzag, tensor.BF16},
		{2, 2, 48, 2, 1, 64, false, ir.LayoutContiguous, tensor.BF16},
		{2, 2, 24, 2, 1, 32, true, ir.LayoutZigzag, tensor.F32},
		{4, 1, 16, 4, 2, 16, true, ir.LayoutZigzag, tensor.F32},
		{4, 2, 12, 2, 2, 24, true, ir.LayoutContiguous, tensor.F32},
		{2, 1, 32, 2, 2, 32, true, ir.LayoutZigzag, tensor.BF16},
	}
	for i, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			total := c.l * int64(c.ranks)
			scale := 0.3
			attrs := ir.A("causal", c.causal, "scale", scale, "ranks", c.ranks, "layout", c.layout)
			full := randomFull(c.b, total, c.h, c.hkv, c.d, uint64(100+i))
			want := unsharded(t, ir.OpAttention, ir.OpAttentionGrad, ir.A("causal", c.causal, "scale", scale), full)
			f := shardedFunc(t, ir.OpRingAttention, ir.OpRingAttentionGrad, attrs, c.b, c.l, c.h, c.hkv, c.d)
			pos := func(r int) []int64 { return ir.LayoutPositions(c.layout, total, int64(c.ranks), int64(r)) }
			ins := make([]map[string]*tensor.Tensor, c.ranks)
			for r := range ins {
				ins[r] = map[string]*tensor.Tensor{}
				for name, x := range full {
					ins[r][name] = takeRows(x, 1, pos(r))
				}
			}
			got := runRanks(t, f, ins, Options{Storage: c.storage})
			tol := 1e-5
			if c.storage == tensor.BF16 {
				tol = 2e-2
			}
			checkSharded(t, c.String(), got, want, pos, tol)
		})
	}
}

// TestGPUShardedDilated runs LongNet's sharded dilated attention and its exact
// gradient on 2 and 4 ranks sharing GPU 0: local branches, far branches whose
// segment spans two ranks or the whole sequence (the sparse all-gather and the
// reduce-scatter of dk, dv), in both tiers and both head-offset rules, against
// the CPU interpreter's unsharded dilated attention at each rank's positions.
func TestGPUShardedDilated(t *testing.T) {
	openGPU(t)
	cases := []struct {
		ringCase
		seg, dil []int64
		offsets  string
	}{
		{ringCase{2, 1, 64, 4, 2, 64, true, ir.LayoutContiguous, tensor.BF16}, []int64{32, 128}, []int64{1, 2},
			"paper"},
		{ringCase{4, 2, 32, 4, 4, 128, true, ir.LayoutContiguous, tensor.BF16}, []int64{16, 64, 128},
			[]int64{1, 2, 4}, "block"},
		{ringCase{2, 2, 16, 4, 2, 32, true, ir.LayoutContiguous, tensor.F32}, []int64{8, 64}, []int64{1, 2},
			"paper"},
		{ringCase{4, 1, 8, 4, 2, 16, true, ir.LayoutContiguous, tensor.F32}, []int64{4, 16, 32},
			[]int64{1, 2, 4}, "block"},
		{ringCase{2, 1, 16, 2, 2, 16, false, ir.LayoutContiguous, tensor.F32}, []int64{8, 32}, []int64{2, 2},
			"paper"},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%v,w=%v,r=%v,%s", c.ringCase, c.seg, c.dil, c.offsets), func(t *testing.T) {
			total := c.l * int64(c.ranks)
			scale := 0.3
			base := ir.A("causal", c.causal, "scale", scale, "segments", c.seg, "dilations", c.dil,
				"offsets", c.offsets)
			full := randomFull(c.b, total, c.h, c.hkv, c.d, uint64(200+i))
			want := unsharded(t, ir.OpDilatedAttention, ir.OpDilatedAttentionGrad, base, full)
			f := shardedFunc(t, ir.OpShardedDilatedAttention, ir.OpShardedDilatedAttentionGrad,
				base.With("ranks", c.ranks), c.b, c.l, c.h, c.hkv, c.d)
			pos := func(r int) []int64 { return ir.LayoutPositions(c.layout, total, int64(c.ranks), int64(r)) }
			ins := make([]map[string]*tensor.Tensor, c.ranks)
			for r := range ins {
				ins[r] = map[string]*tensor.Tensor{}
				for name, x := range full {
					ins[r][name] = takeRows(x, 1, pos(r))
				}
			}
			got := runRanks(t, f, ins, Options{Storage: c.storage})
			tol := 1e-5
			if c.storage == tensor.BF16 {
				tol = 2e-2
			}
			checkSharded(t, c.String(), got, want, pos, tol)
		})
	}
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
	openGPU(t)
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
