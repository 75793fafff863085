package cuda

import (
	"fmt"

	"github.com/lcc-dev/lcc/codegen/cuda/clit"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// rms_norm_grad (ir/ops_norm.go) runs as one kernel over rows plus, with a scale,
// a two-stage column reduction for dscale:
//
//   - stage 1: each of P blocks takes a contiguous stretch of rows and handles them
//     one at a time: it loads the row of x and dy into registers (CPV vectors of
//     L columns per thread, 16-byte loads where rows allow, coalesced), the next
//     row's loads issued before this row's sums; recomputes r = 1/√(mean(x²) + eps)
//     and mean(g ⊙ x̂) with fp32 block sums (lcc_block_sum), writes dx, and adds
//     dy ⊙ x̂ into per-thread column sums that it stores as row p of a [P, m] fp32
//     scratch;
//   - stage 2: each column's P partial rows are summed in 128 interleaved groups,
//     each in order, then the groups in a fixed tree (8 columns per block).
//
// Both orders are fixed, so dscale is bitwise reproducible; the column sums read
// contiguous rows (coalesced), unlike a column reduction of the [rows, m] product.

const rmsNormGradBody = `// %[11]s over %[1]d rows of %[2]d (%[3]d blocks of rows, %[12]d lanes per access)
#define ROWS %[1]dLL
#define M %[2]dLL
#define P %[3]dLL
#define NT %[4]d
#define CPV %[5]d
#define HAS_SCALE %[6]d
#define EPS %[7]s
#define LN %[9]d
#define HAS_BIAS %[10]d
#define L %[12]d
#define RESID %[13]d
// Thread t holds the vectors t, t + NT, ... of L columns each; COL is the column
// of its e-th register.
#define COL(e) (((long long)threadIdx.x + (long long)((e) / L) * NT) * L + (e) %% L)
extern "C" __global__ void __launch_bounds__(NT) @KERNEL@(%[8]s) {
  __shared__ float sh[32];
  const long long per = (ROWS + P - 1) / P;
  const long long r0 = blockIdx.x * per, r1 = lcc_min(r0 + per, ROWS);
  float acc[CPV * L], accb[CPV * L], sv[CPV * L];
#pragma unroll
  for (int e = 0; e < CPV * L; ++e) { acc[e] = 0.0f; accb[e] = 0.0f; sv[e] = 1.0f; }
#if HAS_SCALE
  // The scale's columns, loaded once: every row of the block uses the same.
#pragma unroll
  for (int k = 0; k < CPV; ++k) {
    const long long j = COL(k * L);
    if (j < M) {
#if L > 1
      lcc_ld16(scale + j, sv + k * L);
#else
      sv[k] = lcc_tof(scale[j]);
#endif
    }
  }
#endif
  // LDROW loads row r of x and dy into registers xa, da, zeros past M.
#if L > 1
#define LDROW1(r, j, xa, da, k) lcc_ld16(x + (r) * M + (j), xa + (k) * L); lcc_ld16(dy + (r) * M + (j), da + (k) * L);
#else
#define LDROW1(r, j, xa, da, k) xa[k] = lcc_tof(x[(r) * M + (j)]); da[k] = lcc_tof(dy[(r) * M + (j)]);
#endif
#define LDROW(r, xa, da) \
  _Pragma("unroll") for (int k = 0; k < CPV; ++k) { \
    const long long j = COL(k * L); \
    _Pragma("unroll") for (int q = 0; q < L; ++q) { xa[k * L + q] = 0.0f; da[k * L + q] = 0.0f; } \
    if (j < M) { LDROW1(r, j, xa, da, k) } \
  }
  float xv[CPV * L], dv[CPV * L], xn[CPV * L], dn[CPV * L];
  if (r0 < r1) { LDROW(r0, xv, dv) }
  for (long long r = r0; r < r1; ++r) {
    // The next row's loads are in flight while this row reduces.
    if (r + 1 < r1) { LDROW(r + 1, xn, dn) }
    float gv[CPV * L];
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < CPV * L; ++e) {
      gv[e] = dv[e] * sv[e];
      ss += LN ? xv[e] : xv[e] * xv[e];
    }
    ss = lcc_block_sum(ss, sh);
#if LN
    // The mean, then the biased variance about it (two passes over registers).
    const float mu = ss / (float)M;
    float vv = 0.0f;
#pragma unroll
    for (int e = 0; e < CPV * L; ++e) {
      if (COL(e) < M) { xv[e] -= mu; vv += xv[e] * xv[e]; }
    }
    vv = lcc_block_sum(vv, sh);
    const float inv = 1.0f / sqrtf(vv / (float)M + EPS);
    float gm = 0.0f;
#pragma unroll
    for (int e = 0; e < CPV * L; ++e) gm += gv[e];
    gm = lcc_block_sum(gm, sh) / (float)M;
#else
    const float inv = 1.0f / sqrtf(ss / (float)M + EPS);
    const float gm = 0.0f;
#endif
    float gx = 0.0f;
#pragma unroll
    for (int e = 0; e < CPV * L; ++e) gx += gv[e] * xv[e] * inv;
    gx = lcc_block_sum(gx, sh) / (float)M;
#pragma unroll
    for (int k = 0; k < CPV; ++k) {
      const long long j = COL(k * L);
      if (j < M) {
        float o[L];
#pragma unroll
        for (int q = 0; q < L; ++q) {
          const int e = k * L + q;
          const float xh = xv[e] * inv;
          o[q] = inv * (gv[e] - gm - xh * gx);
          acc[e] += dv[e] * xh;
          accb[e] += dv[e];
        }
#if L > 1
#if RESID
        float rr[L];
        lcc_ld16(res + r * M + j, rr);
#pragma unroll
        for (int q = 0; q < L; ++q) o[q] += rr[q];
#endif
        lcc_st16(dx + r * M + j, o);
#else
#if RESID
        o[0] += lcc_tof(res[r * M + j]);
#endif
        lcc_set(&dx[r * M + j], o[0]);
#endif
      }
    }
#pragma unroll
    for (int e = 0; e < CPV * L; ++e) { xv[e] = xn[e]; dv[e] = dn[e]; }
  }
#if HAS_SCALE
#pragma unroll
  for (int e = 0; e < CPV * L; ++e) {
    if (COL(e) < M) part[blockIdx.x * M + COL(e)] = acc[e];
  }
#endif
#if HAS_BIAS
#pragma unroll
  for (int e = 0; e < CPV * L; ++e) {
    if (COL(e) < M) part[(P + blockIdx.x) * M + COL(e)] = accb[e];
  }
#endif
}
`

// rmsNormColBody sums the partial rows column by column: a block takes
// normColWidth columns, each summed by normColGroups groups of rows. A warp
// reads four rows' 32 bytes (whole sectors), and the block's 128 groups keep
// enough loads in flight that a few hundred blocks draw the GPU's bandwidth,
// where a block of 32 columns left most SMs idle at hidden sizes near 1024.
const rmsNormColBody = `// norm backward: dscale or dbias[%[2]d] from %[1]d partial rows, %[4]d columns per
// block, %[5]d groups of rows each summed in order, then the groups in a fixed tree
#define P %[1]dLL
#define M %[2]dLL
#define CB %[4]d
#define RG %[5]d
extern "C" __global__ void __launch_bounds__(CB * RG) @KERNEL@(%[3]s) {
  __shared__ float sh[RG][CB + 1];
  const int tx = threadIdx.x %% CB, ty = threadIdx.x / CB;
  const long long j = (long long)blockIdx.x * CB + tx;
  float s = 0.0f;
  if (j < M) {
#pragma unroll 8
    for (long long p = ty; p < P; p += RG) s += part[p * M + j];
  }
  sh[ty][tx] = s;
  __syncthreads();
  for (int h = RG / 2; h > 0; h >>= 1) {
    if (ty < h) sh[ty][tx] += sh[ty + h][tx];
    __syncthreads();
  }
  if (ty == 0 && j < M) lcc_set(&ds[j], sh[0][tx]);
}
`

// The column sums' block: normColWidth columns × normColGroups groups of rows.
const normColWidth, normColGroups = 8, 128

// lowerRMSNormGrad renders the two kernels above; layer_norm_grad (the same with
// the mean taken out, mean(g) in dx, and dbias from a second block of partials)
// shares them.
func lowerRMSNormGrad(g *gen, n *ir.Node) error {
	x, dy, dx := n.Args[0], n.Args[len(n.Args)-1], n.Results[0]
	ax, err := ir.AxisIndex(n.AttrInt("axis"), x.Type.Rank())
	if err != nil {
		return err
	}
	m := prod(x.Type.Shape[ax:])
	rows := prod(x.Type.Shape[:ax])
	if m == 0 || rows == 0 {
		return nil
	}
	// Blocks of rows: a block's rows run one after another, the next row's loads
	// under this row's sums, so about half the GPU's threads keep its bandwidth
	// drawn; fewer blocks write fewer fp32 partial rows (2^21 elements at most,
	// 8 MiB, a block at least).
	p := min(rows, max(256, min(1024, (1<<21)/m)))
	ln := n.Op == ir.OpLayerNormGrad
	hasScale := len(n.Args) >= 3
	hasBias := ln && len(n.Args) == 4
	// A residual add of dx (residual.go) happens before the store: the kernel
	// writes the add's result, and dx never exists.
	add, res := g.resid[n], dy
	if add != nil {
		dx, res = add.Result(), add.Args[0]
		if res == n.Results[0] {
			res = add.Args[1]
		}
	}
	// 16-byte accesses when x, dy, dx (and the scale) share a storage dtype that
	// has them and rows are whole vectors.
	lanes := vecLanes(g.storageOf(x), m)
	for _, v := range []*ir.Value{dy, dx, n.Args[1], res} {
		if g.storageOf(v) != g.storageOf(x) {
			lanes = 1
		}
	}
	nt := pow2((m+3)/4, 32, 1024)
	if lanes > 1 {
		nt = pow2(m/lanes, 32, 1024)
	}
	cpv := (m/lanes + nt - 1) / nt
	params := []Param{g.param("dx", dx, true), g.param("x", x, false), g.param("dy", dy, false)}
	args := []int{g.ids[dx], g.ids[x], g.ids[dy]}
	var part int
	if hasScale {
		part = g.temp(tensor.F32, (1+int64(b2i(hasBias)))*p, m)
		params = append(params, g.param("scale", n.Args[1], false), Param{Name: "part", CType: "float", Out: true})
		args = append(args, g.ids[n.Args[1]], part)
	}
	if add != nil {
		params = append(params, g.param("res", res, false))
		args = append(args, g.ids[res])
	}
	body := fmt.Sprintf(rmsNormGradBody, rows, m, p, nt, cpv, b2i(hasScale),
		clit.Float(n.AttrFloat("eps")), signature(params), b2i(ln), b2i(hasBias), n.Op, lanes, b2i(add != nil))
	g.emit(kernelSpec{op: n.Op.String(), body: body, grid: [3]uint32{uint32(p), 1, 1},
		block: [3]uint32{uint32(nt), 1, 1}, params: params, args: args})
	if !hasScale {
		return nil
	}
	for i, ds := range n.Results[1:] {
		params = []Param{g.param("ds", ds, true), {Name: "part", CType: "float"}}
		g.emit(kernelSpec{op: n.Op.String() + ".scale", body: fmt.Sprintf(rmsNormColBody, p, m, signature(params), normColWidth, normColGroups),
			grid: [3]uint32{uint32((m + normColWidth - 1) / normColWidth), 1, 1}, block: [3]uint32{normColWidth * normColGroups, 1, 1}, params: params,
			args: []int{g.ids[ds], part}, offs: []int64{0, int64(i) * p * m}})
	}
	return nil
}
