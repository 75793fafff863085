package attention

import (
	"fmt"
	"math"
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

func bf16(x float64) float64 { return float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(float32(x)))) }

// With an exact operand the tiled online softmax is exact attention, whatever the
// tile: the roundings are the only thing Rounding changes.
func TestRoundingIdentityIsExact(t *testing.T) {
	exact := func(x float64) float64 { return x }
	for i, c := range denseCases {
		for _, tile := range []int{1, 2, 3, 64} {
			t.Run(fmt.Sprintf("%d/tile=%d", i, tile), func(t *testing.T) {
				r := Rounding{KeyTile: tile, Operand: exact}
				q, k, v, do := inputs(c.d, uint64(i))
				o, lse := Dense(q, k, v, c.d, c.causal, 0.6)
				ro, rlse := DenseRounded(q, k, v, c.d, c.causal, 0.6, r)
				checkClose(t, "o", ro, o, 1e-12)
				checkClose(t, "lse", rlse, lse, 1e-12)
				dq, dk, dv := DenseBackward(q, k, v, o, lse, do, c.d, c.causal, 0.6)
				rq, rk, rv := DenseBackwardRounded(q, k, v, o, lse, do, c.d, c.causal, 0.6, r)
				checkClose(t, "dq", rq, dq, 1e-12)
				checkClose(t, "dk", rk, dk, 1e-12)
				checkClose(t, "dv", rv, dv, 1e-12)
			})
		}
	}
	for i, c := range dilatedCases {
		r := Rounding{KeyTile: 2, Operand: exact}
		q, k, v, do := inputs(c.d, uint64(i))
		o, lse := Dilated(q, k, v, c.d, c.cfg, 0.6)
		ro, rlse := DilatedRounded(q, k, v, c.d, c.cfg, 0.6, r)
		checkClose(t, fmt.Sprint("dilated o ", i), ro, o, 1e-12)
		checkClose(t, fmt.Sprint("dilated lse ", i), rlse, lse, 1e-12)
		dq, dk, dv := DilatedBackward(q, k, v, o, lse, do, c.d, c.cfg, 0.6)
		rq, rk, rv := DilatedBackwardRounded(q, k, v, o, lse, do, c.d, c.cfg, 0.6, r)
		checkClose(t, fmt.Sprint("dilated dq ", i), rq, dq, 1e-12)
		checkClose(t, fmt.Sprint("dilated dk ", i), rk, dk, 1e-12)
		checkClose(t, fmt.Sprint("dilated dv ", i), rv, dv, 1e-12)
	}
}

// kernelRow is the forward of one row as the tensor-core kernels define it, in
// closed form rather than as a loop over tiles: key j of tile j/tile is rounded
// relative to m_j, the maximum over the tiles up to its own, then rescaled to the
// row's maximum m; the row sum is unrounded.
func kernelRow(s []float64, vs [][]float64, tile int) (o []float64, lse float64) {
	m := math.Inf(-1)
	for _, x := range s {
		m = max(m, x)
	}
	sum := 0.0
	o = make([]float64, len(vs[0]))
	for j, x := range s {
		mj := math.Inf(-1)
		for i := range min((j/tile+1)*tile, len(s)) {
			mj = max(mj, s[i])
		}
		sum += math.Exp(x - m)
		w := math.Exp(mj-m) * bf16(math.Exp(x-mj))
		for i, y := range vs[j] {
			o[i] += w * y
		}
	}
	for i := range o {
		o[i] /= sum
	}
	return o, m + math.Log(sum)
}

// The loop of rowForwardRounded computes kernelRow's closed form, and its backward
// rounds P and dS before they multiply (dV = bf16(P)ᵀ·dO, dK = s·bf16(dS)ᵀ·Q,
// dQ = s·bf16(dS)·K), on a causal grouped-query case with peaked scores whose row
// maxima move between tiles.
func TestRoundingIsTheKernels(t *testing.T) {
	d := Dims{B: 1, T: 9, S: 9, Hq: 2, Hkv: 1, D: 3}
	q, k, v, do := inputs(d, 5)
	for i := range q {
		q[i] *= 3 // peaked softmax: scores up to about ±20
	}
	const scale, tile = 0.9, 2
	r := Rounding{KeyTile: tile, Operand: bf16}
	o, lse := DenseRounded(q, k, v, d, true, scale, r)
	kv := d.head(0, 0, k, v, nil, nil)
	for h := range d.Hq {
		for tq := range d.T {
			row := d.qAt(0, tq, h)
			var s []float64
			var vs [][]float64
			for j := 0; j <= tq; j++ {
				s = append(s, scale*dot(q[row:row+d.D], kv.row(k, j)))
				vs = append(vs, kv.row(v, j))
			}
			wo, wl := kernelRow(s, vs, tile)
			checkClose(t, fmt.Sprintf("o[h=%d,t=%d]", h, tq), o[row:row+d.D], wo, 1e-12)
			checkClose(t, fmt.Sprintf("lse[h=%d,t=%d]", h, tq), lse[d.lseAt(0, h, tq):][:1], []float64{wl}, 1e-12)
		}
	}
	dq, dk, dv := DenseBackwardRounded(q, k, v, o, lse, do, d, true, scale, r)
	wq, wk, wv := make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
	for h := range d.Hq {
		for tq := range d.T {
			row := d.qAt(0, tq, h)
			delta := dot(do[row:row+d.D], o[row:row+d.D])
			for j := 0; j <= tq; j++ {
				kr := j * d.D
				p := math.Exp(scale*dot(q[row:row+d.D], k[kr:kr+d.D]) - lse[d.lseAt(0, h, tq)])
				ds := bf16(p * (dot(do[row:row+d.D], v[kr:kr+d.D]) - delta))
				for i := range d.D {
					wv[kr+i] += bf16(p) * do[row+i]
					wk[kr+i] += scale * ds * q[row+i]
					wq[row+i] += scale * ds * k[kr+i]
				}
			}
		}
	}
	checkClose(t, "dq", dq, wq, 1e-12)
	checkClose(t, "dk", dk, wk, 1e-12)
	checkClose(t, "dv", dv, wv, 1e-12)
}

// The forward's result depends on the key tile (bf16 rounding does not commute
// with the rescaling by exp(m_old − m_new)), and both tiles stay within a few
// units of bf16 rounding of exact attention.
func TestRoundingKeyTileMatters(t *testing.T) {
	d := Dims{B: 1, T: 32, S: 32, Hq: 1, Hkv: 1, D: 4}
	q, k, v, _ := inputs(d, 9)
	for i := range q {
		q[i] *= 3
	}
	exact, _ := Dense(q, k, v, d, true, 1)
	a, _ := DenseRounded(q, k, v, d, true, 1, Rounding{KeyTile: 4, Operand: bf16})
	b, _ := DenseRounded(q, k, v, d, true, 1, Rounding{KeyTile: 32, Operand: bf16})
	rel := func(x, y []float64) float64 {
		var num, den float64
		for i := range x {
			num += (x[i] - y[i]) * (x[i] - y[i])
			den += y[i] * y[i]
		}
		return math.Sqrt(num / den)
	}
	if r := rel(a, b); r == 0 {
		t.Errorf("key tiles 4 and 32 give the same output: the running maximum is not modelled")
	}
	for _, c := range []struct {
		name string
		o    []float64
	}{{"tile 4", a}, {"tile 32", b}} {
		if r := rel(c.o, exact); r == 0 || r > 4*0x1p-8 {
			t.Errorf("%s: %.3g from exact attention, want within (0, 4 units of bf16 rounding]", c.name, r)
		}
	}
}
