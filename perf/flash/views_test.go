package flash

import (
	"fmt"
	"math/rand/v2"
	"testing"

	fk "github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// TestGPUViews runs attention on q, k and v read in place from one packed
// buffer, as a fused qkv projection lays them out (rows of [q heads, k heads, v
// heads] with a gap after each row and each batch), and writes dq, dk and dv into
// a second one (flash.Desc.Views). Every output must be bitwise the one the
// kernels give from the tensors' own buffers, and the gaps of the gradient
// buffer, poisoned first, must be untouched.
func TestGPUViews(t *testing.T) {
	d, cache := gpu(t)
	cases := []struct {
		name         string
		b, t, hq, hk int
		dim          int
		causal       bool
	}{
		{"causal-d64-gqa", 2, 333, 4, 2, 64, true},
		{"full-d128", 1, 200, 2, 2, 128, false},
		{"causal-d128-gqa", 1, 400, 6, 2, 128, true},
	}
	for i, c := range cases {
		for _, vr := range tierVariants(d, fk.DQFused) {
			for _, split := range []bool{false, true} {
				if split && c.hq == c.hk {
					continue
				}
				t.Run(fmt.Sprintf("%s/tier%d/split=%v", c.name, vr.tier, split), func(t *testing.T) {
					desc := fk.Desc{B: int64(c.b), T: int64(c.t), S: int64(c.t), Hq: c.hq, Hkv: c.hk, D: c.dim,
						Causal: c.causal, DQ: fk.DQFused, Tier: vr.tier, SplitHeads: split}
					viewsRun(t, d, cache, uint64(i), desc)
				})
			}
		}
	}
}

func viewsRun(t *testing.T, d *cuda.Device, cache *cuda.Cache, seed uint64, desc fk.Desc) {
	rng := rand.New(rand.NewPCG(seed, 23))
	b, n, hq, hk, dim := int(desc.B), int(desc.T), desc.Hq, desc.Hkv, desc.D
	nq, nk, nl := b*n*hq*dim, b*n*hk*dim, b*hq*n
	// The packed layout: a row holds q's, k's and v's heads, then 8 elements of
	// gap; a batch holds n rows, then 16 more.
	row := (hq+2*hk)*dim + 8
	batch := n*row + 16
	offs := [3]int{0, hq * dim, (hq + hk) * dim}
	widths := [3]int{hq * dim, hk * dim, hk * dim}
	lay := func(i int) fk.Layout { return fk.Layout{Off: int64(offs[i]), Row: int64(row), Batch: int64(batch)} }
	vd := desc
	vd.Views = fk.Views{Q: lay(0), K: lay(1), V: lay(2), DQ: lay(0), DK: lay(1), DV: lay(2)}

	own, err := New(d, cache, desc)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	viewed, err := New(d, cache, vd)
	if err != nil {
		t.Fatal(err)
	}
	defer viewed.Close()

	q, _ := randBF16(t, d, rng, nq, 1)
	k, _ := randBF16(t, d, rng, nk, 1)
	v, _ := randBF16(t, d, rng, nk, 1)
	do, _ := randBF16(t, d, rng, nq, 1)
	parts := [3]buf{q, k, v}
	// pack copies q, k and v into the packed layout, the gaps NaN (0xffff).
	packed := make([]uint16, b*batch)
	for i := range packed {
		packed[i] = 0xffff
	}
	for p := range 3 {
		h := raw(t, d, parts[p])
		for bi := range b {
			for r := range n {
				src := (bi*n + r) * widths[p]
				copy(packed[bi*batch+r*row+offs[p]:], h[src:src+widths[p]])
			}
		}
	}
	qkv := alloc(t, d, len(packed), true)
	if err := cuda.CopyHtoD(d, qkv.p, packed); err != nil {
		t.Fatal(err)
	}

	o0, l0 := alloc(t, d, nq, true), alloc(t, d, nl, false)
	o1, l1 := alloc(t, d, nq, true), alloc(t, d, nl, false)
	if err := own.Forward(nil, o0.p, l0.p, q.p, k.p, v.p); err != nil {
		t.Fatal(err)
	}
	if err := viewed.Forward(nil, o1.p, l1.p, qkv.p, qkv.p, qkv.p); err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := alloc(t, d, nq, true), alloc(t, d, nk, true), alloc(t, d, nk, true)
	delta := alloc(t, d, nl, false)
	if err := own.Backward(nil, dq.p, dk.p, dv.p, q.p, k.p, v.p, o0.p, l0.p, do.p, delta.p); err != nil {
		t.Fatal(err)
	}
	grad := alloc(t, d, len(packed), true) // poisoned: 0xffff everywhere
	if err := viewed.Backward(nil, grad.p, grad.p, grad.p, qkv.p, qkv.p, qkv.p, o1.p, l1.p, do.p, delta.p); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	same := func(name string, got, want []uint16) {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: element %d is %#04x, own buffers give %#04x", name, i, got[i], want[i])
				return
			}
		}
	}
	same("o", raw(t, d, o1), raw(t, d, o0))
	same("lse", raw32(t, d, l1), raw32(t, d, l0))
	g := raw(t, d, grad)
	for p, want := range [3]buf{dq, dk, dv} {
		w := raw(t, d, want)
		got := make([]uint16, 0, len(w))
		for bi := range b {
			for r := range n {
				at := bi*batch + r*row + offs[p]
				got = append(got, g[at:at+widths[p]]...)
			}
		}
		same([3]string{"dq", "dk", "dv"}[p], got, w)
	}
	// The gaps: after each row's heads, and after each batch's rows.
	for bi := range b {
		for r := range n {
			for j := (hq + 2*hk) * dim; j < row; j++ {
				if x := g[bi*batch+r*row+j]; x != 0xffff {
					t.Fatalf("gradient row gap (batch %d, row %d, element %d) written: %#04x", bi, r, j, x)
				}
			}
		}
		for j := n * row; j < batch; j++ {
			if x := g[bi*batch+j]; x != 0xffff {
				t.Fatalf("gradient batch gap (batch %d, element %d) written: %#04x", bi, j, x)
			}
		}
	}
}

// raw is x's bf16 bits.
func raw(t *testing.T, d *cuda.Device, x buf) []uint16 {
	t.Helper()
	h := make([]uint16, x.n)
	if err := cuda.CopyDtoH(d, h, x.p); err != nil {
		t.Fatal(err)
	}
	return h
}

// raw32 is x's fp32 bits, as the high and low halves of each word (for same).
func raw32(t *testing.T, d *cuda.Device, x buf) []uint16 {
	t.Helper()
	h := make([]uint32, x.n)
	if err := cuda.CopyDtoH(d, h, x.p); err != nil {
		t.Fatal(err)
	}
	out := make([]uint16, 0, 2*len(h))
	for _, w := range h {
		out = append(out, uint16(w>>16), uint16(w))
	}
	return out
}
