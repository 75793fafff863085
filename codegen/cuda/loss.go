package cuda

import (
	"fmt"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// lossRowBody computes one row's loss per block: softmax cross-entropy
// logsumexp(x) − x[label], or nll −x[label]. An ignored row gives loss 0 and
// count 0; a label out of range gives NaN (the CPU interpreter reports an error).
const lossRowBody = `// %[1]s rows of %[2]s: one block per row
#define C %[3]dLL
#define HAS_IGNORE %[4]d
#define IGNORE %[5]s
#define NLL %[6]d
#define NONE %[7]d
extern "C" __global__ void __launch_bounds__(%[8]d) @KERNEL@(%[9]s) {
  __shared__ float sh[%[8]d];
  const long long r = blockIdx.x;
  const long long l = (long long)labels[r];
  if (HAS_IGNORE && l == IGNORE) {
    if (threadIdx.x == 0) {
      lcc_set(&loss[r], 0.0f);
#if !NONE
      cnt[r] = 0.0f;
#endif
    }
    return;
  }
  const bool ok = l >= 0 && l < C;
  float v = 0.0f;
  if (NLL) {
    v = ok ? -lcc_tof(x[r * C + l]) : LCC_NAN;
  } else {
    float mx = -LCC_INF;
    for (long long j = threadIdx.x; j < C; j += blockDim.x) mx = lcc_max(mx, lcc_tof(x[r * C + j]));
    mx = lcc_block_reduce(mx, sh, lcc_op_max());
    float s = 0.0f;
    for (long long j = threadIdx.x; j < C; j += blockDim.x) s += lcc_exp(lcc_tof(x[r * C + j]) - mx);
    s = lcc_block_reduce(s, sh, lcc_op_add());
    const float lse = (mx == LCC_INF || mx == -LCC_INF) ? mx : mx + lcc_log(s);
    v = ok ? lse - lcc_tof(x[r * C + l]) : LCC_NAN;
  }
  if (threadIdx.x == 0) {
    lcc_set(&loss[r], v);
#if !NONE
    cnt[r] = 1.0f;
#endif
  }
}
`

// lossSumBody folds the per-row losses in a fixed order: the sum, or the mean
// over rows not ignored (NaN when all are, as in PyTorch).
// One block for all rows rather than atomics into y: the fold order is fixed, so
// the loss is bit-identical run to run, and N is small next to N·C.
const lossSumBody = `// %[1]s reduction %[2]s over %[3]d rows
#define N %[3]dLL
#define MEAN %[4]d
extern "C" __global__ void __launch_bounds__(%[5]d) @KERNEL@(%[6]s) {
  __shared__ float sh[%[5]d];
  float s = 0.0f, c = 0.0f;
  for (long long j = threadIdx.x; j < N; j += blockDim.x) { s += loss[j]; c += cnt[j]; }
  s = lcc_block_reduce(s, sh, lcc_op_add());
  c = lcc_block_reduce(c, sh, lcc_op_add());
  if (threadIdx.x == 0) lcc_set(&y[0], MEAN ? s / c : s);
}
`

// lowerLoss renders softmax_cross_entropy and nll_loss over [N, C] logits.
func lowerLoss(g *gen, n *ir.Node) error {
	x := n.Args[0]
	g.loss(n, g.ids[x], storageC[g.storageOf(x)], x.Type.Shape[0], x.Type.Shape[1], n.Args[1],
		n.Result(), n.Op == ir.OpNLLLoss)
	return nil
}

// loss emits the row kernel and, for mean and sum, the fold, over logits in
// buffer xID ([rows, c] of C type xC); n supplies the attributes.
func (g *gen) loss(n *ir.Node, xID int, xC string, rows, c int64, labels, y *ir.Value, isNLL bool) {
	// ignore_index may be present but null (an ONNX attribute with no value); only
	// an integer value enables the ignore test.
	ign, hasIgnore := n.Attrs.Get("ignore_index")
	iv, _ := ign.(int64)
	red := n.AttrString("reduction")
	nll, none := b2i(isNLL), b2i(red == "none")
	hi := b2i(hasIgnore && ign != nil)
	bs := pow2(c, 32, 256)
	// nll reads one element per row, so a single warp is plenty; more threads would idle.
	if isNLL {
		bs = 32
	}
	var params []Param
	var args []int
	var lossID, cntID int
	if none == 1 {
		// With reduction none the per-row losses are the result itself; otherwise they
		// and the counts go to temporaries that only the fold reads.
		params = []Param{g.param("loss", y, true)}
		args = []int{g.ids[y]}
	} else {
		// fp32 whatever the storage: bf16 per-row losses would lose digits before the sum.
		lossID, cntID = g.temp(tensor.F32, rows), g.temp(tensor.F32, rows)
		params = []Param{{Name: "loss", CType: "float", Out: true}, {Name: "cnt", CType: "float", Out: true}}
		args = []int{lossID, cntID}
	}
	params = append(params, Param{Name: "x", CType: xC}, g.param("labels", labels, false))
	args = append(args, xID, g.ids[labels])
	xt := fmt.Sprintf("%s[%d,%d]", xC, rows, c)
	body := fmt.Sprintf(lossRowBody, n.Op, xt, c, hi, ilit(iv), nll, none, bs, signature(params))
	g.emit(kernelSpec{op: n.Op.String(), body: body, grid: [3]uint32{uint32(rows), 1, 1},
		block: [3]uint32{uint32(bs), 1, 1}, params: params, args: args})
	if none == 1 {
		return
	}
	// The counts make the mean skip ignored rows, as PyTorch's does.
	params = []Param{g.param("y", y, true), {Name: "loss", CType: "float"}, {Name: "cnt", CType: "float"}}
	body = fmt.Sprintf(lossSumBody, n.Op, red, rows, b2i(red == "mean"), 256, signature(params))
	g.emit(kernelSpec{op: n.Op.String() + ".sum", body: body, grid: [3]uint32{1, 1, 1},
		block: [3]uint32{256, 1, 1}, params: params, args: []int{g.ids[y], lossID, cntID}})
}
