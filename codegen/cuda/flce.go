package cuda

import (
	"fmt"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// This first GPU version of fused_linear_cross_entropy materialises the
// [N, V] logits in a scratch buffer: one cuBLASLt GEMM, then the
// softmax_cross_entropy kernels. The backward recomputes the logits, turns them in
// place into G = c ⊙ (softmax − onehot), and takes dh = G·op(w)ᵀ and dw from two
// more GEMMs. The chunked version that never holds [N, V] (ir/ops_fused.go) is
// future work; results are the same up to rounding.

// flceCountBody counts the rows whose label is not ignored (for the mean).
const flceCountBody = `// fused_linear_cross_entropy_grad: rows not ignored among %[1]d
#define N %[1]dLL
#define HAS_IGNORE %[2]d
#define IGNORE %[3]s
extern "C" __global__ void __launch_bounds__(256) @KERNEL@(%[4]s) {
  __shared__ float sh[256];
  float c = 0.0f;
  for (long long r = threadIdx.x; r < N; r += blockDim.x) c += (HAS_IGNORE && (long long)labels[r] == IGNORE) ? 0.0f : 1.0f;
  c = lcc_block_reduce(c, sh, lcc_op_add());
  if (threadIdx.x == 0) cnt[0] = c;
}
`

// flceGradBody overwrites one row of logits z with G = c·(softmax(z) − onehot),
// c the row's loss cotangent (0 for an ignored row).
const flceGradBody = `// fused_linear_cross_entropy_grad: G over %[1]s, one block per row
#define C %[2]dLL
#define HAS_IGNORE %[3]d
#define IGNORE %[4]s
#define MODE %[5]d
extern "C" __global__ void __launch_bounds__(%[6]d) @KERNEL@(%[7]s) {
  __shared__ float sh[%[6]d];
  const long long r = blockIdx.x;
  const long long l = (long long)labels[r];
  float c = MODE == 0 ? lcc_tof(dloss[r]) : (MODE == 1 ? lcc_tof(dloss[0]) : lcc_tof(dloss[0]) / cnt[0]);
  if (HAS_IGNORE && l == IGNORE) c = 0.0f;
  else if (l < 0 || l >= C) c = LCC_NAN;
  float mx = -LCC_INF;
  for (long long j = threadIdx.x; j < C; j += blockDim.x) mx = lcc_max(mx, lcc_tof(z[r * C + j]));
  mx = lcc_block_reduce(mx, sh, lcc_op_max());
  float s = 0.0f;
  for (long long j = threadIdx.x; j < C; j += blockDim.x) s += lcc_exp(lcc_tof(z[r * C + j]) - mx);
  s = lcc_block_reduce(s, sh, lcc_op_add());
  for (long long j = threadIdx.x; j < C; j += blockDim.x) {
    const float p = lcc_exp(lcc_tof(z[r * C + j]) - mx) / s;
    lcc_set(&z[r * C + j], c == 0.0f ? 0.0f : c * (p - (j == l ? 1.0f : 0.0f)));
  }
}
`

// flceLogits plans z = h·op(w) into a new scratch buffer and returns its id.
func (g *gen) flceLogits(n *ir.Node) (z int, rows, d, v int64, err error) {
	h, w, labels := n.Args[0], n.Args[1], n.Args[2]
	tw := n.Attrs.Bool("transpose_w")
	rows, d, v, err = ir.FLCEDims(h.Type, w.Type, labels.Type, tw)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	dt := g.storageOf(h)
	if dt != g.storageOf(w) || (dt != tensor.F32 && dt != tensor.BF16 && dt != tensor.F16) {
		return 0, 0, 0, 0, fmt.Errorf("h and w stored as %v and %v: want one of f32, bf16, f16",
			dt, g.storageOf(w))
	}
	z = g.temp(dt, rows, v)
	g.gemm(g.ids[h], g.ids[w], z, Gemm{TransB: tw, M: rows, N: v, K: d, Batch: 1, DType: dt.String()})
	return z, rows, d, v, nil
}

// gemm appends a GEMM step.
func (g *gen) gemm(a, b, c int, gm Gemm) {
	g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "gemm", Node: g.node, Op: "matmul",
		Args: []int{a, b, c}, Gemm: &gm})
}

// lowerFLCE is the forward: logits by GEMM, then the cross-entropy kernels.
func lowerFLCE(g *gen, n *ir.Node) error {
	z, rows, _, v, err := g.flceLogits(n)
	if err != nil || rows == 0 || v == 0 {
		return err
	}
	g.loss(n, z, storageC[g.storageOf(n.Args[0])], rows, v, n.Args[2], n.Result(), false)
	return nil
}

// lowerFLCEGrad is the backward: logits, G in place, dh and dw by GEMM.
func lowerFLCEGrad(g *gen, n *ir.Node) error {
	z, rows, d, v, err := g.flceLogits(n)
	if err != nil {
		return err
	}
	if rows == 0 || v == 0 || d == 0 {
		return fmt.Errorf("fused_linear_cross_entropy_grad with an empty dim (N=%d, d=%d, V=%d) is not supported on the GPU", rows, d, v)
	}
	h, w, labels, dloss := n.Args[0], n.Args[1], n.Args[2], n.Args[3]
	dh, dw := n.Results[0], n.Results[1]
	tw := n.Attrs.Bool("transpose_w")
	ign, hasIgnore := n.Attrs.Get("ignore_index")
	iv, _ := ign.(int64)
	hi := b2i(hasIgnore && ign != nil)
	mode := map[string]int{"none": 0, "sum": 1, "mean": 2}[n.Attrs.String("reduction", "mean")]
	cnt := g.temp(tensor.F32, 1)
	params := []Param{{Name: "cnt", CType: "float", Out: true}, g.param("labels", labels, false)}
	g.emit(kernelSpec{op: n.Op.String() + ".count", body: fmt.Sprintf(flceCountBody, rows, hi, ilit(iv),
		signature(params)), grid: [3]uint32{1, 1, 1}, block: [3]uint32{256, 1, 1}, params: params,
		args: []int{cnt, g.ids[labels]}})
	zc := storageC[g.storageOf(h)]
	bs := pow2(v, 32, 256)
	params = []Param{{Name: "z", CType: zc, Out: true}, g.param("labels", labels, false),
		g.param("dloss", dloss, false), {Name: "cnt", CType: "float"}}
	g.emit(kernelSpec{op: n.Op.String() + ".g", body: fmt.Sprintf(flceGradBody,
		fmt.Sprintf("%s[%d,%d]", zc, rows, v), v, hi, ilit(iv), mode, bs, signature(params)),
		grid: [3]uint32{uint32(rows), 1, 1}, block: [3]uint32{uint32(bs), 1, 1}, params: params,
		args: []int{z, g.ids[labels], g.ids[dloss], cnt}})
	dt := g.storageOf(h).String()
	// dh [N, d] = G [N, V] · op(w)ᵀ: w [d, V] is op(w)ᵀ stored transposed.
	g.gemm(z, g.ids[w], g.ids[dh], Gemm{TransB: !tw, M: rows, N: d, K: v, Batch: 1, DType: dt})
	if tw {
		// dw [V, d] = Gᵀ · h.
		g.gemm(z, g.ids[h], g.ids[dw], Gemm{TransA: true, M: v, N: d, K: rows, Batch: 1, DType: dt})
	} else {
		// dw [d, V] = hᵀ · G.
		g.gemm(g.ids[h], z, g.ids[dw], Gemm{TransA: true, M: d, N: v, K: rows, Batch: 1, DType: dt})
	}
	return nil
}
