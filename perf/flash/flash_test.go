package flash

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/lcc-dev/lcc/internal/gputest"

	fk "github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/interp/attention"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

var (
	devOnce sync.Once
	dev     *cuda.Device
	devErr  error
)

// gpu returns GPU 0 and a kernel cache, or skips the test.
func gpu(t *testing.T) (*cuda.Device, *cuda.Cache) {
	t.Helper()
	devOnce.Do(func() { dev, devErr = cuda.Open(0) })
	if devErr != nil {
		gputest.Skipf(t, "skipping: no GPU: %v", devErr)
	}
	if major, _ := dev.ComputeCapability(); major < 8 {
		gputest.Skipf(t, "skipping: %s is older than sm_80", dev.Name())
	}
	cache, err := cuda.OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dev, cache
}

// tierVariant is one kernel tier and backward mode a GPU test runs.
type tierVariant struct {
	tier int
	mode fk.DQMode
}

// tierVariants is tier 1 with each of modes, then tier 2 with the fused
// backward where d runs it (an sm_90 GPU with an NVRTC for sm_90a).
func tierVariants(d *cuda.Device, modes ...fk.DQMode) []tierVariant {
	var vs []tierVariant
	for _, m := range modes {
		vs = append(vs, tierVariant{1, m})
	}
	if fk.TierFor(d.CodegenArch()) == 2 {
		vs = append(vs, tierVariant{2, fk.DQFused})
	}
	return vs
}

// buf is a device buffer with its host copy in float64.
type buf struct {
	p    cuda.DevicePtr
	n    int
	bf16 bool
}

func alloc(t *testing.T, d *cuda.Device, n int, bf16 bool) buf {
	t.Helper()
	size := n * 4
	if bf16 {
		size = n * 2
	}
	p, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	// Poison: 0xff bytes are NaN in bf16 and in fp32.
	if err := d.Memset8(p, 0xff, size); err != nil {
		t.Fatal(err)
	}
	return buf{p: p, n: n, bf16: bf16}
}

// randBF16 uploads n normal values rounded to bf16 and returns them as float64.
func randBF16(t *testing.T, d *cuda.Device, rng *rand.Rand, n int, scale float64) (buf, []float64) {
	b := alloc(t, d, n, true)
	h := make([]uint16, n)
	x := make([]float64, n)
	for i := range h {
		h[i] = tensor.Float32ToBF16(float32(rng.NormFloat64() * scale))
		x[i] = float64(tensor.BF16ToFloat32(h[i]))
	}
	if err := cuda.CopyHtoD(d, b.p, h); err != nil {
		t.Fatal(err)
	}
	return b, x
}

func upload32(t *testing.T, d *cuda.Device, x []float64) buf {
	b := alloc(t, d, len(x), false)
	h := make([]float32, len(x))
	for i, v := range x {
		h[i] = float32(v)
	}
	if err := cuda.CopyHtoD(d, b.p, h); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b buf) get(t *testing.T, d *cuda.Device) []float64 {
	t.Helper()
	x := make([]float64, b.n)
	if b.bf16 {
		h := make([]uint16, b.n)
		if err := cuda.CopyDtoH(d, h, b.p); err != nil {
			t.Fatal(err)
		}
		for i, v := range h {
			x[i] = float64(tensor.BF16ToFloat32(v))
		}
		return x
	}
	h := make([]float32, b.n)
	if err := cuda.CopyDtoH(d, h, b.p); err != nil {
		t.Fatal(err)
	}
	for i, v := range h {
		x[i] = float64(v)
	}
	return x
}

// relErr is ‖got − want‖ / ‖want‖ over the finite-want entries; a NaN in got is
// an infinite error. lse rows of −Inf must match exactly.
func relErr(got, want []float64) float64 {
	var num, den float64
	for i := range want {
		if math.IsInf(want[i], -1) {
			if !math.IsInf(got[i], -1) {
				return math.Inf(1)
			}
			continue
		}
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			return math.Inf(1)
		}
		num += (got[i] - want[i]) * (got[i] - want[i])
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

const tol = 2e-2

type denseCase struct {
	name            string
	b, t, s, hq, hk int
	dim             int
	causal          bool
	tiles           [4]int // forward Br, Bc, WM, Stages; zero: the defaults
}

func TestGPUDense(t *testing.T) {
	d, cache := gpu(t)
	cases := []denseCase{
		{"causal-d64", 1, 200, 200, 2, 2, 64, true, [4]int{}},
		{"causal-d128-ragged", 2, 333, 333, 2, 2, 128, true, [4]int{}},
		{"full-d64-ragged-gqa", 1, 150, 271, 4, 2, 64, false, [4]int{}},
		{"causal-d128-gqa", 1, 256, 256, 6, 2, 128, true, [4]int{}},
		{"full-d128", 1, 128, 64, 2, 1, 128, false, [4]int{}},
		// Many key tiles per query tile: 12 CTAs (causal) or 9 (full, ragged)
		// add into each query tile's fused dQ sum.
		{"causal-d128-gqa-long", 1, 1536, 1536, 4, 2, 128, true, [4]int{}},
		{"full-d64-long", 1, 700, 1100, 2, 2, 64, false, [4]int{}},
		// The forward tiles of long dense D=128 sequences.
		{"causal-d128-long-tiles", 1, 700, 700, 2, 2, 128, true, [4]int{256, 32, 2, 3}},
		// Head dims padded to the kernels' 128 or 64 (flash.Desc.KD).
		{"causal-d96-gqa", 1, 333, 333, 4, 2, 96, true, [4]int{}},
		{"full-d80-ragged", 2, 150, 271, 2, 1, 80, false, [4]int{}},
		{"causal-d32", 1, 300, 300, 2, 2, 32, true, [4]int{}},
		{"causal-d112-long", 1, 1100, 1100, 2, 2, 112, true, [4]int{}},
		// Head dim 256 (tier 1 only), and 192 padded to it.
		{"causal-d256-gqa", 1, 600, 600, 4, 2, 256, true, [4]int{}},
		{"full-d256-ragged", 1, 150, 271, 2, 2, 256, false, [4]int{}},
		{"causal-d192", 1, 300, 300, 2, 1, 192, true, [4]int{}},
	}
	for i, cm := range cases {
		for _, vr := range tierVariants(d, fk.DQFused, fk.DQSplit) {
			c, mode := cm, vr.mode
			if vr.tier == 2 && c.tiles != [4]int{} {
				continue // tier 1's forward tiles
			}
			if c.dim > 128 && (vr.tier == 2 || mode == fk.DQSplit) {
				continue // above 128: tier 1 with the fused backward only
			}
			for _, split := range []bool{false, true} {
				if split && (mode != fk.DQFused || c.hq == c.hk) {
					continue // split heads: the fused grouped-query backward
				}
				denseCaseRun(t, d, cache, i, c, vr, mode, split)
			}
		}
	}
}

// denseCaseRun is one TestGPUDense subtest: c at tier vr with dQ mode mode,
// the backward split by query head or not.
func denseCaseRun(t *testing.T, d *cuda.Device, cache *cuda.Cache, i int, c denseCase, vr tierVariant,
	mode fk.DQMode, split bool) {
	t.Run(fmt.Sprintf("%s/tier%d/dq%d/split=%v", c.name, vr.tier, mode, split), func(t *testing.T) {
		rng := rand.New(rand.NewPCG(uint64(i), 11))
		dims := attention.Dims{B: c.b, T: c.t, S: c.s, Hq: c.hq, Hkv: c.hk, D: c.dim}
		desc := fk.Desc{B: int64(c.b), T: int64(c.t), S: int64(c.s), Hq: c.hq, Hkv: c.hk, D: c.dim, Causal: c.causal, DQ: mode,
			Br: c.tiles[0], Bc: c.tiles[1], WM: c.tiles[2], Stages: c.tiles[3], Tier: vr.tier, SplitHeads: split}
		a, err := New(d, cache, desc)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		nq, nk, nl := c.b*c.t*c.hq*c.dim, c.b*c.s*c.hk*c.dim, c.b*c.hq*c.t
		q, qh := randBF16(t, d, rng, nq, 1)
		k, kh := randBF16(t, d, rng, nk, 1)
		v, vh := randBF16(t, d, rng, nk, 1)
		do, doh := randBF16(t, d, rng, nq, 1)
		o, lse := alloc(t, d, nq, true), alloc(t, d, nl, false)
		if err := a.Forward(nil, o.p, lse.p, q.p, k.p, v.p); err != nil {
			t.Fatal(err)
		}
		if err := d.Synchronize(); err != nil {
			t.Fatal(err)
		}
		scale := 1 / math.Sqrt(float64(c.dim))
		wo, wl := attention.Dense(qh, kh, vh, dims, c.causal, scale)
		oh, lh := o.get(t, d), lse.get(t, d)
		if e := relErr(oh, wo); e > tol {
			t.Errorf("o: relative error %.3g > %g", e, tol)
		}
		if e := relErr(lh, wl); e > 1e-3 {
			t.Errorf("lse: relative error %.3g", e)
		}
		// The backward from the GPU's own o and lse (what training does).
		wdq, wdk, wdv := attention.DenseBackward(qh, kh, vh, oh, lh, doh, dims, c.causal, scale)
		checkBackward(t, d, a, [3][]float64{wdq, wdk, wdv}, nq, nk, nl, q, k, v, o, lse, do)
	})
}

// TestGPURing splits the keys into two ring blocks with position offsets and
// merges them in fp32: the result is dense causal attention over all keys, and the
// blocks' backward with the global o and lse sums to the dense gradient.
func TestGPURing(t *testing.T) {
	d, _ := gpu(t)
	for _, vr := range tierVariants(d, fk.DQSplit) {
		t.Run(fmt.Sprintf("tier%d", vr.tier), func(t *testing.T) { testRing(t, vr.tier) })
	}
}

func testRing(t *testing.T, tier int) {
	d, cache := gpu(t)
	const B, T, H, D = 1, 192, 2, 64
	rng := rand.New(rand.NewPCG(5, 5))
	nq, nl := B*T*H*D, B*H*T
	q, qh := randBF16(t, d, rng, nq, 1)
	k, kh := randBF16(t, d, rng, nq, 1)
	v, vh := randBF16(t, d, rng, nq, 1)
	do, doh := randBF16(t, d, rng, nq, 1)
	// Queries are the last 128 rows (positions 64..191); key blocks [0,64), [64,192).
	const T2 = 128
	half := func(x buf, from int) cuda.DevicePtr { return x.p + cuda.DevicePtr(from*H*D*2) }
	o := upload32(t, d, make([]float64, B*T2*H*D))
	lse0 := make([]float64, B*H*T2)
	for i := range lse0 {
		lse0[i] = math.Inf(-1)
	}
	lse := upload32(t, d, lse0)
	for _, blk := range []struct{ kpos, rows int }{{0, 64}, {64, 128}} {
		desc := fk.Desc{B: B, T: T2, S: int64(blk.rows), Hq: H, Hkv: H, D: D, Causal: true,
			QPos: 64, KPos: int64(blk.kpos), Accumulate: true, Tier: tier}
		a, err := New(d, cache, desc)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Forward(nil, o.p, lse.p, half(q, 64), half(k, blk.kpos), half(v, blk.kpos)); err != nil {
			t.Fatal(err)
		}
		a.Close()
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	dims := attention.Dims{B: B, T: T, S: T, Hq: H, Hkv: H, D: D}
	wo, wl := attention.Dense(qh, kh, vh, dims, true, 1/math.Sqrt(D))
	oh, lh := o.get(t, d), lse.get(t, d)
	if e := relErr(oh, wo[64*H*D:]); e > tol {
		t.Errorf("ring o: relative error %.3g", e)
	}
	var wl2 []float64
	for h := 0; h < H; h++ {
		wl2 = append(wl2, wl[h*T+64:h*T+T]...)
	}
	if e := relErr(lh, wl2); e > 1e-3 {
		t.Errorf("ring lse: relative error %.3g", e)
	}
	// The blocks' backward with the global o and lse adds up to the gradient of
	// the 128 queries over all 192 keys.
	ob := alloc(t, d, len(oh), true)
	hb := make([]uint16, len(oh))
	for i, x := range oh {
		hb[i] = tensor.Float32ToBF16(float32(x))
	}
	if err := cuda.CopyHtoD(d, ob.p, hb); err != nil {
		t.Fatal(err)
	}
	zero := func(n int) buf { return upload32(t, d, make([]float64, n)) }
	dq, dkv := zero(B*T2*H*D), [2]buf{zero(nq), zero(nq)}
	delta := alloc(t, d, B*H*T2, false)
	for i, blk := range []struct{ kpos, rows int }{{0, 64}, {64, 128}} {
		desc := fk.Desc{B: B, T: T2, S: int64(blk.rows), Hq: H, Hkv: H, D: D, Causal: true,
			QPos: 64, KPos: int64(blk.kpos), Accumulate: true}
		a, err := New(d, cache, desc)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := a.Delta(nil, delta.p, ob.p, half(do, 64)); err != nil {
				t.Fatal(err)
			}
		}
		off := cuda.DevicePtr(blk.kpos * H * D * 4)
		if err := a.BackwardWith(nil, dq.p, dkv[0].p+off, dkv[1].p+off, half(q, 64), half(k, blk.kpos),
			half(v, blk.kpos), lse.p, delta.p, half(do, 64)); err != nil {
			t.Fatal(err)
		}
		if err := d.Synchronize(); err != nil {
			t.Fatal(err)
		}
		a.Close()
	}
	d2 := attention.Dims{B: B, T: T2, S: T, Hq: H, Hkv: H, D: D}
	oh2 := make([]float64, len(oh))
	for i := range hb {
		oh2[i] = float64(tensor.BF16ToFloat32(hb[i]))
	}
	wdq, wdk, wdv := attention.DenseAtBackward(qh[64*H*D:], kh, vh, oh2, lh, doh[64*H*D:], d2, 64, 0, true, 1/math.Sqrt(D))
	for j, c := range []struct {
		got  []float64
		want []float64
	}{{dq.get(t, d), wdq}, {dkv[0].get(t, d), wdk}, {dkv[1].get(t, d), wdv}} {
		if e := relErr(c.got, c.want); e > tol {
			t.Errorf("ring %s: relative error %.3g", []string{"dq", "dk", "dv"}[j], e)
		}
	}
	_ = nl
}

// TestGPUDilated compares LongNet dilated attention (ragged last segments, a
// segment longer than the sequence, grouped-query heads, both offset rules) and
// its exact backward, split and fused (in one row chunk, and in four, the
// branch of dilation 1 moved first), with the CPU reference, and checks the
// backward is bitwise reproducible.
func TestGPUDilated(t *testing.T) {
	d, cache := gpu(t)
	for i, c := range []struct {
		name         string
		b, t, hq, hk int
		dim          int
		brs          []Branch
		offsets      string
	}{
		{"paper-gqa-d64", 1, 300, 4, 2, 64, []Branch{{64, 1}, {128, 2}, {512, 4}}, "paper"},
		{"block-d128", 2, 200, 4, 4, 128, []Branch{{48, 1}, {96, 3}}, "block"},
		{"paper-chunks-d128", 1, 1024, 4, 4, 128, []Branch{{128, 2}, {64, 1}, {256, 4}}, "paper"},
	} {
		for _, vr := range tierVariants(d, fk.DQSplit, fk.DQFused) {
			mode := vr.mode
			t.Run(fmt.Sprintf("%s/tier%d/%s", c.name, vr.tier, map[fk.DQMode]string{fk.DQSplit: "split", fk.DQFused: "fused"}[mode]), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(i), 17))
				dims := attention.Dims{B: c.b, T: c.t, S: c.t, Hq: c.hq, Hkv: c.hk, D: c.dim}
				cfg := attention.DilatedConfig{Causal: true, Offsets: attention.Paper}
				if c.offsets == "block" {
					cfg.Offsets = attention.Block
				}
				for _, b := range c.brs {
					cfg.Branches = append(cfg.Branches, attention.Branch{Segment: int(b.W), Dilation: b.R})
				}
				desc := fk.Desc{B: int64(c.b), T: int64(c.t), S: int64(c.t), Hq: c.hq, Hkv: c.hk, D: c.dim,
					Causal: true, Offsets: c.offsets, DQ: mode, Tier: vr.tier}
				a, err := NewDilated(d, cache, desc, c.brs)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				nq, nk, nl := c.b*c.t*c.hq*c.dim, c.b*c.t*c.hk*c.dim, c.b*c.hq*c.t
				q, qh := randBF16(t, d, rng, nq, 1)
				k, kh := randBF16(t, d, rng, nk, 1)
				v, vh := randBF16(t, d, rng, nk, 1)
				do, doh := randBF16(t, d, rng, nq, 1)
				o, lse, oAcc := alloc(t, d, nq, true), alloc(t, d, nl, false), alloc(t, d, nq, false)
				if err := a.Forward(nil, o.p, lse.p, q.p, k.p, v.p, oAcc.p); err != nil {
					t.Fatal(err)
				}
				if err := d.Synchronize(); err != nil {
					t.Fatal(err)
				}
				scale := 1 / math.Sqrt(float64(c.dim))
				wo, wl := attention.Dilated(qh, kh, vh, dims, cfg, scale)
				oh, lh := o.get(t, d), lse.get(t, d)
				if e := relErr(oh, wo); e > tol {
					t.Errorf("o: relative error %.3g > %g", e, tol)
				}
				if e := relErr(lh, wl); e > 1e-3 {
					t.Errorf("lse: relative error %.3g", e)
				}
				wdq, wdk, wdv := attention.DilatedBackward(qh, kh, vh, oh, lh, doh, dims, cfg, scale)
				var first [3][]float64
				for run := 0; run < 2; run++ {
					dq, dk, dv := alloc(t, d, nq, true), alloc(t, d, nk, true), alloc(t, d, nk, true)
					delta, accA, accB := alloc(t, d, nl, false), alloc(t, d, max(nq, nk), false), alloc(t, d, nk, false)
					if err := a.Backward(nil, dq.p, dk.p, dv.p, q.p, k.p, v.p, o.p, lse.p, do.p, delta.p, accA.p, accB.p); err != nil {
						t.Fatal(err)
					}
					if err := d.Synchronize(); err != nil {
						t.Fatal(err)
					}
					got := [3][]float64{dq.get(t, d), dk.get(t, d), dv.get(t, d)}
					if run == 0 {
						first = got
						for j, w := range [][]float64{wdq, wdk, wdv} {
							if e := relErr(got[j], w); e > tol {
								t.Errorf("%s: relative error %.3g > %g", []string{"dq", "dk", "dv"}[j], e, tol)
							}
						}
						continue
					}
					for j := range got {
						for x := range got[j] {
							if math.Float64bits(got[j][x]) != math.Float64bits(first[j][x]) {
								t.Fatalf("%s differs between two runs at %d", []string{"dq", "dk", "dv"}[j], x)
							}
						}
					}
				}
			})
		}
	}
}

// TestFusedChunks: the fused dilated backward runs in four row chunks when
// each holds whole segments of every branch, else in fewer.
func TestFusedChunks(t *testing.T) {
	for _, c := range []struct {
		d    fk.Desc
		brs  []Branch
		want int64
	}{
		{fk.Desc{B: 1, T: 1 << 20}, []Branch{{2048, 1}, {4096, 2}, {8192, 4}, {16384, 8}, {32768, 16}}, 4},
		{fk.Desc{B: 1, T: 1024}, []Branch{{64, 1}, {128, 2}, {256, 4}}, 4},
		{fk.Desc{B: 1, T: 1024}, []Branch{{256, 1}, {512, 2}}, 2},
		{fk.Desc{B: 1, T: 1024}, []Branch{{512, 1}}, 1},
		{fk.Desc{B: 2, T: 1024}, []Branch{{64, 1}}, 1},
		{fk.Desc{B: 1, T: 300}, []Branch{{64, 1}}, 1},
	} {
		if got := fusedChunks(c.d, c.brs); got != c.want {
			t.Errorf("B=%d T=%d %v: %d chunks, want %d", c.d.B, c.d.T, c.brs, got, c.want)
		}
	}
}

// TestGPUFillConvert runs the fill and the fp32 → bf16 conversion on aligned
// buffers and at a 4-byte offset (the scalar path), with lengths that leave a
// tail, against the host.
func TestGPUFillConvert(t *testing.T) {
	d, cache := gpu(t)
	ld := loader{dev: d, cache: cache}
	defer ld.close()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{4096, 1002} {
		for _, off := range []int{0, 2} { // elements: 0 or 8 bytes of fp32, 4 bytes of bf16
			xs := make([]float64, n+off)
			for i := range xs {
				xs[i] = rng.NormFloat64()
			}
			x := upload32(t, d, xs)
			y := alloc(t, d, n+off, true)
			conv, err := ld.load(fk.Convert(int64(n)))
			if err != nil {
				t.Fatal(err)
			}
			fill, err := ld.load(fk.Fill(int64(n-1), 0xff800000))
			if err != nil {
				t.Fatal(err)
			}
			if err := conv.launch(nil, y.p+cuda.DevicePtr(2*off), x.p+cuda.DevicePtr(4*off)); err != nil {
				t.Fatal(err)
			}
			if err := fill.launch(nil, x.p+cuda.DevicePtr(4*off)); err != nil {
				t.Fatal(err)
			}
			if err := d.Synchronize(); err != nil {
				t.Fatal(err)
			}
			gy, gx := y.get(t, d), x.get(t, d)
			for i := off; i < n+off; i++ {
				if want := float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(float32(xs[i])))); gy[i] != want {
					t.Fatalf("n=%d off=%d: y[%d] = %g, want %g", n, off, i, gy[i], want)
				}
				want := math.Inf(-1)
				if i == n+off-1 {
					want = float64(float32(xs[i]))
				}
				if gx[i] != want {
					t.Fatalf("n=%d off=%d: filled x[%d] = %g, want %g", n, off, i, gx[i], want)
				}
			}
			if !math.IsNaN(gy[0]) && off > 0 {
				t.Fatalf("n=%d off=%d: y[0] written", n, off)
			}
		}
	}
}

// TestGPUDocs runs the document mask of packed documents (Desc.Docs) at each tier
// against the CPU's DenseDocs on random data with outputs poisoned first: ragged
// documents (one token long, shorter and longer than a tile, crossing tiles),
// grouped-query heads, a batch whose rows pack differently. The backward runs
// twice and must give the same bits.
func TestGPUDocs(t *testing.T) {
	d, cache := gpu(t)
	cases := []struct {
		name            string
		b, t, hq, hk, d int
		lens            []int // document lengths of row 0; row 1 packs them reversed
	}{
		{"d128-gqa-ragged", 2, 1000, 4, 2, 128, []int{1, 37, 300, 64, 2, 596}},
		{"d64-gqa8", 1, 777, 8, 1, 64, []int{200, 1, 1, 575}},
		{"d128-long", 1, 3000, 2, 2, 128, []int{1500, 129, 1371}},
		{"d64-one-doc", 1, 513, 2, 2, 64, []int{513}},
	}
	for i, c := range cases {
		for _, vr := range tierVariants(d, fk.DQFused) {
			t.Run(fmt.Sprintf("%s/tier%d", c.name, vr.tier), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(i), 13))
				starts := make([]int64, 0, c.b*c.t)
				for row := range c.b {
					pos := 0
					for j := range c.lens {
						l := c.lens[j]
						if row%2 == 1 {
							l = c.lens[len(c.lens)-1-j]
						}
						for range l {
							starts = append(starts, int64(pos))
						}
						pos += l
					}
				}
				if len(starts) != c.b*c.t {
					t.Fatalf("the lengths sum to %d per row, want %d", len(starts)/c.b, c.t)
				}
				desc := fk.Desc{B: int64(c.b), T: int64(c.t), S: int64(c.t), Hq: c.hq, Hkv: c.hk, D: c.d,
					Causal: true, Docs: true, DQ: vr.mode, Tier: vr.tier}
				checkStarts(t, d, cache, rng, desc, starts, starts)
			})
		}
	}
}

// checkStarts runs attention desc (dense causal, its rows' first visible keys
// from documents or a window) on random data, outputs poisoned, against the
// CPU's DenseDocs over starts, each query's first visible key: the forward,
// then the backward twice (checkBackward). docs, when desc.Docs, is the doc
// starts the kernels read.
func checkStarts(t *testing.T, d *cuda.Device, cache *cuda.Cache, rng *rand.Rand, desc fk.Desc, starts,
	docs []int64) {
	t.Helper()
	a, err := New(d, cache, desc)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if desc.Docs {
		sb := alloc(t, d, 2*len(docs), false) // int64: two words each
		if err := cuda.CopyHtoD(d, sb.p, docs); err != nil {
			t.Fatal(err)
		}
		a.Starts = sb.p
	}
	b, tl, hq, hk, dim := int(desc.B), int(desc.T), desc.Hq, desc.Hkv, desc.D
	dims := attention.Dims{B: b, T: tl, S: tl, Hq: hq, Hkv: hk, D: dim}
	nq, nk, nl := b*tl*hq*dim, b*tl*hk*dim, b*hq*tl
	q, qh := randBF16(t, d, rng, nq, 1)
	k, kh := randBF16(t, d, rng, nk, 1)
	v, vh := randBF16(t, d, rng, nk, 1)
	do, doh := randBF16(t, d, rng, nq, 1)
	o, lse := alloc(t, d, nq, true), alloc(t, d, nl, false)
	if err := a.Forward(nil, o.p, lse.p, q.p, k.p, v.p); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	scale := 1 / math.Sqrt(float64(dim))
	wo, wl := attention.DenseDocs(qh, kh, vh, dims, starts, 0, 0, scale, attention.Rounding{})
	oh, lh := o.get(t, d), lse.get(t, d)
	if e := relErr(oh, wo); e > tol {
		t.Errorf("o: relative error %.3g > %g", e, tol)
	}
	if e := relErr(lh, wl); e > 1e-3 {
		t.Errorf("lse: relative error %.3g", e)
	}
	wdq, wdk, wdv := attention.DenseDocsBackward(qh, kh, vh, oh, lh, doh, dims, starts, 0, 0, scale,
		attention.Rounding{})
	checkBackward(t, d, a, [3][]float64{wdq, wdk, wdv}, nq, nk, nl, q, k, v, o, lse, do)
}

// checkBackward runs a's backward twice into fresh poisoned buffers (dq of nq
// elements, dk and dv of nk, delta of nl): the first run's dq, dk, dv must be
// within tol of want, the second must give the same bits.
func checkBackward(t *testing.T, d *cuda.Device, a *Attention, want [3][]float64, nq, nk, nl int,
	q, k, v, o, lse, do buf) {
	t.Helper()
	names := []string{"dq", "dk", "dv"}
	var first [3][]float64
	for run := 0; run < 2; run++ {
		dq, dk, dv := alloc(t, d, nq, true), alloc(t, d, nk, true), alloc(t, d, nk, true)
		delta := alloc(t, d, nl, false)
		if err := a.Backward(nil, dq.p, dk.p, dv.p, q.p, k.p, v.p, o.p, lse.p, do.p, delta.p); err != nil {
			t.Fatal(err)
		}
		if err := d.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := [3][]float64{dq.get(t, d), dk.get(t, d), dv.get(t, d)}
		if run == 0 {
			first = got
			for j, w := range want {
				e := relErr(got[j], w)
				if e > tol {
					t.Errorf("%s: relative error %.3g > %g", names[j], e, tol)
				}
				t.Logf("%s: relative error %.3g", names[j], e)
			}
			continue
		}
		for j := range got {
			for x := range got[j] {
				if math.Float64bits(got[j][x]) != math.Float64bits(first[j][x]) {
					t.Fatalf("%s differs between two runs at %d", names[j], x)
				}
			}
		}
	}
}
