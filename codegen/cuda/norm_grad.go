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
//     one at a time: it loads the row of x and dy into registers (CPT columns per
//     thread, coalesced), recomputes r = 1/√(mean(x²) + eps) and mean(g ⊙ x̂) with
//     fp32 tree reductions, writes dx, and adds dy ⊙ x̂ into per-thread column sums
//     that it stores as row p of a [P, m] fp32 scratch;
//   - stage 2: one thread per column sums the P partial rows in order.
//
// Both orders are fixed, so dscale is bitwise reproducible; the column sums read
// contiguous rows (coalesced), unlike a column reduction of the [rows, m] product.

const rmsNormGradBody = `// %[11]s over %[1]d rows of %[2]d (%[3]d blocks of rows)
#define ROWS %[1]dLL
#define M %[2]dLL
#define P %[3]dLL
#define NT %[4]d
#define CPT %[5]d
#define HAS_SCALE %[6]d
#define EPS %[7]s
#define LN %[9]d
#define HAS_BIAS %[10]d
extern "C" __global__ void __launch_bounds__(NT) @KERNEL@(%[8]s) {
  __shared__ float sh[NT];
  const long long per = (ROWS + P - 1) / P;
  const long long r0 = blockIdx.x * per, r1 = lcc_min(r0 + per, ROWS);
  float acc[CPT], accb[CPT];
#pragma unroll
  for (int k = 0; k < CPT; ++k) { acc[k] = 0.0f; accb[k] = 0.0f; }
  for (long long r = r0; r < r1; ++r) {
    float xv[CPT], gv[CPT], dv[CPT];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      const long long j = threadIdx.x + (long long)k * NT;
      xv[k] = 0.0f; gv[k] = 0.0f; dv[k] = 0.0f;
      if (j < M) {
        xv[k] = lcc_tof(x[r * M + j]);
        dv[k] = lcc_tof(dy[r * M + j]);
#if HAS_SCALE
        gv[k] = dv[k] * lcc_tof(scale[j]);
#else
        gv[k] = dv[k];
#endif
      }
      ss += LN ? xv[k] : xv[k] * xv[k];
    }
    ss = lcc_block_reduce(ss, sh, lcc_op_add());
#if LN
    // The mean, then the biased variance about it (two passes over registers).
    const float mu = ss / (float)M;
    float vv = 0.0f;
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      const long long j = threadIdx.x + (long long)k * NT;
      if (j < M) { xv[k] -= mu; vv += xv[k] * xv[k]; }
    }
    vv = lcc_block_reduce(vv, sh, lcc_op_add());
    const float inv = 1.0f / sqrtf(vv / (float)M + EPS);
    float gm = 0.0f;
#pragma unroll
    for (int k = 0; k < CPT; ++k) gm += gv[k];
    gm = lcc_block_reduce(gm, sh, lcc_op_add()) / (float)M;
#else
    const float inv = 1.0f / sqrtf(ss / (float)M + EPS);
    const float gm = 0.0f;
#endif
    float gx = 0.0f;
#pragma unroll
    for (int k = 0; k < CPT; ++k) gx += gv[k] * xv[k] * inv;
    gx = lcc_block_reduce(gx, sh, lcc_op_add()) / (float)M;
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      const long long j = threadIdx.x + (long long)k * NT;
      if (j < M) {
        const float xh = xv[k] * inv;
        lcc_set(&dx[r * M + j], inv * (gv[k] - gm - xh * gx));
        acc[k] += dv[k] * xh;
        accb[k] += dv[k];
      }
    }
  }
#if HAS_SCALE
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    const long long j = threadIdx.x + (long long)k * NT;
    if (j < M) part[blockIdx.x * M + j] = acc[k];
  }
#endif
#if HAS_BIAS
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    const long long j = threadIdx.x + (long long)k * NT;
    if (j < M) part[(P + blockIdx.x) * M + j] = accb[k];
  }
#endif
}
`

const rmsNormColBody = `// norm backward: dscale or dbias[%[2]d] from %[1]d partial rows, in order
#define P %[1]dLL
#define M %[2]dLL
extern "C" __global__ void __launch_bounds__(256) @KERNEL@(%[3]s) {
  const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= M) return;
  float s = 0.0f;
  for (long long p = 0; p < P; ++p) s += part[p * M + j];
  lcc_set(&ds[j], s);
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
	nt := pow2((m+3)/4, 32, 1024)
	cpt := (m + nt - 1) / nt
	p := min(rows, 512)
	ln := n.Op == ir.OpLayerNormGrad
	hasScale := len(n.Args) >= 3
	hasBias := ln && len(n.Args) == 4
	params := []Param{g.param("dx", dx, true), g.param("x", x, false), g.param("dy", dy, false)}
	args := []int{g.ids[dx], g.ids[x], g.ids[dy]}
	var part int
	if hasScale {
		part = g.temp(tensor.F32, (1+int64(b2i(hasBias)))*p, m)
		params = append(params, g.param("scale", n.Args[1], false), Param{Name: "part", CType: "float", Out: true})
		args = append(args, g.ids[n.Args[1]], part)
	}
	body := fmt.Sprintf(rmsNormGradBody, rows, m, p, nt, cpt, b2i(hasScale),
		clit.Float(n.AttrFloat("eps")), signature(params), b2i(ln), b2i(hasBias), n.Op)
	g.emit(kernelSpec{op: n.Op.String(), body: body, grid: [3]uint32{uint32(p), 1, 1},
		block: [3]uint32{uint32(nt), 1, 1}, params: params, args: args})
	if !hasScale {
		return nil
	}
	for i, ds := range n.Results[1:] {
		params = []Param{g.param("ds", ds, true), {Name: "part", CType: "float"}}
		g.emit(kernelSpec{op: n.Op.String() + ".scale", body: fmt.Sprintf(rmsNormColBody, p, m, signature(params)),
			grid: [3]uint32{uint32((m + 255) / 256), 1, 1}, block: [3]uint32{256, 1, 1}, params: params,
			args: []int{g.ids[ds], part}, offs: []int64{0, int64(i) * p * m}})
	}
	return nil
}
