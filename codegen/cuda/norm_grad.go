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
//     L columns per thread, 16-byte loads where rows allow, coalesced), recomputes r = 1/√(mean(x²) + eps) and mean(g ⊙ x̂) with
//     fp32 tree reductions, writes dx, and adds dy ⊙ x̂ into per-thread column sums
//     that it stores as row p of a [P, m] fp32 scratch;
//   - stage 2: each column's P partial rows are summed in eight interleaved
//     groups, each in order, then the groups in order (32 columns per block).
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
  __shared__ float sh[NT];
  const long long per = (ROWS + P - 1) / P;
  const long long r0 = blockIdx.x * per, r1 = lcc_min(r0 + per, ROWS);
  float acc[CPV * L], accb[CPV * L];
#pragma unroll
  for (int e = 0; e < CPV * L; ++e) { acc[e] = 0.0f; accb[e] = 0.0f; }
  for (long long r = r0; r < r1; ++r) {
    float xv[CPV * L], gv[CPV * L], dv[CPV * L];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < CPV; ++k) {
      const long long j = COL(k * L);
#pragma unroll
      for (int q = 0; q < L; ++q) { xv[k * L + q] = 0.0f; dv[k * L + q] = 0.0f; gv[k * L + q] = 0.0f; }
      if (j < M) {
#if L > 1
        lcc_ld16(x + r * M + j, xv + k * L);
        lcc_ld16(dy + r * M + j, dv + k * L);
#if HAS_SCALE
        lcc_ld16(scale + j, gv + k * L);
#endif
#else
        xv[k] = lcc_tof(x[r * M + j]);
        dv[k] = lcc_tof(dy[r * M + j]);
#if HAS_SCALE
        gv[k] = lcc_tof(scale[j]);
#endif
#endif
#pragma unroll
        for (int q = 0; q < L; ++q) gv[k * L + q] = HAS_SCALE ? dv[k * L + q] * gv[k * L + q] : dv[k * L + q];
      }
#pragma unroll
      for (int q = 0; q < L; ++q) ss += LN ? xv[k * L + q] : xv[k * L + q] * xv[k * L + q];
    }
    ss = lcc_block_reduce(ss, sh, lcc_op_add());
#if LN
    // The mean, then the biased variance about it (two passes over registers).
    const float mu = ss / (float)M;
    float vv = 0.0f;
#pragma unroll
    for (int e = 0; e < CPV * L; ++e) {
      if (COL(e) < M) { xv[e] -= mu; vv += xv[e] * xv[e]; }
    }
    vv = lcc_block_reduce(vv, sh, lcc_op_add());
    const float inv = 1.0f / sqrtf(vv / (float)M + EPS);
    float gm = 0.0f;
#pragma unroll
    for (int e = 0; e < CPV * L; ++e) gm += gv[e];
    gm = lcc_block_reduce(gm, sh, lcc_op_add()) / (float)M;
#else
    const float inv = 1.0f / sqrtf(ss / (float)M + EPS);
    const float gm = 0.0f;
#endif
    float gx = 0.0f;
#pragma unroll
    for (int e = 0; e < CPV * L; ++e) gx += gv[e] * xv[e] * inv;
    gx = lcc_block_reduce(gx, sh, lcc_op_add()) / (float)M;
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

const rmsNormColBody = `// norm backward: dscale or dbias[%[2]d] from %[1]d partial rows, 32 columns per
// block, 8 groups of rows each summed in order, then the groups in order
#define P %[1]dLL
#define M %[2]dLL
extern "C" __global__ void __launch_bounds__(256) @KERNEL@(%[3]s) {
  __shared__ float sh[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const long long j = (long long)blockIdx.x * 32 + tx;
  float s = 0.0f;
  if (j < M) {
#pragma unroll 8
    for (long long p = ty; p < P; p += 8) s += part[p * M + j];
  }
  sh[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && j < M) {
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) t += sh[k][tx];
    lcc_set(&ds[j], t);
  }
}
`

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
	// Enough blocks of rows to fill the GPU (a block's rows run one after another),
	// with the fp32 partials kept to 16 MiB.
	p := min(rows, max(512, min(2048, (1<<22)/m)))
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
		g.emit(kernelSpec{op: n.Op.String() + ".scale", body: fmt.Sprintf(rmsNormColBody, p, m, signature(params)),
			grid: [3]uint32{uint32((m + 31) / 32), 1, 1}, block: [3]uint32{256, 1, 1}, params: params,
			args: []int{g.ids[ds], part}, offs: []int64{0, int64(i) * p * m}})
	}
	return nil
}
