package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/codegen/cuda/clit"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// reduceOps gives, per reduction, its combining functor, its identity per
// accumulator kind, and the fold of the final value (%s is the accumulator, $R
// the element count). Sums accumulate in fp32 (int64 for integers).
//
// An integer mean over zero elements would divide by zero (undefined, not a NaN),
// so it folds to 0; the float forms give NaN as PyTorch does. INT64_MIN is written
// as -MAX-1: the literal 9223372036854775808 does not fit in long long.
var reduceOps = map[ir.Op]struct {
	functor        string
	initF, initD   string
	initI          string
	finalF, finalI string
}{
	ir.OpReduceSum:  {"lcc_op_add", "0.0f", "0.0", "0LL", "%s", "%s"},
	ir.OpReduceMean: {"lcc_op_add", "0.0f", "0.0", "0LL", "%s / $R", "($R > 0 ? %s / $R : 0LL)"},
	ir.OpReduceMax:  {"lcc_op_max", "(-LCC_INF)", "(-LCC_DINF)", "(-9223372036854775807LL - 1)", "%s", "%s"},
	ir.OpReduceMin:  {"lcc_op_min", "LCC_INF", "LCC_DINF", "9223372036854775807LL", "%s", "%s"},
}

// lowerReduce reduces over any set of axes: one block per output element (one
// thread per output when the reduced extent is small), threads striding over the
// reduced elements, then a fixed-order tree.
func lowerReduce(g *gen, n *ir.Node) error {
	x, y := n.Args[0], n.Result()
	axes, err := ir.ReduceAxes(n.Attrs, x.Type.Rank())
	if err != nil {
		return err
	}
	// Split the input's dims into kept (they index the output) and reduced ones,
	// keeping each dim's stride in x so neither needs to be contiguous.
	red := map[int]bool{}
	for _, a := range axes {
		red[a] = true
	}
	xs := stridesOf(x.Type.Shape)
	var keptShape, keptSt, redShape, redSt []int64
	for d, s := range x.Type.Shape {
		if red[d] {
			redShape, redSt = append(redShape, s), append(redSt, xs[d])
		} else {
			keptShape, keptSt = append(keptShape, s), append(keptSt, xs[d])
		}
	}
	nOut, nRed := prod(keptShape), prod(redShape)
	// 32-bit index math where the input allows: integer division is cheaper than 64-bit.
	it := idxType(x.Type.Numel())
	ro := reduceOps[n.Op]
	acc := accC(x.Type.DType)
	init, final := ro.initF, ro.finalF
	switch acc {
	case "double":
		init = ro.initD
	case "long long":
		init, final = ro.initI, ro.finalI
	}
	// $R is cast to the accumulator's type so a mean divides in fp32 (or int64), not int.
	final = strings.ReplaceAll(fmt.Sprintf(final, "acc"), "$R", fmt.Sprintf("(%s)%d", acc, nRed))
	ld := func(idx string) string {
		v := load(g.storageOf(x), "x["+idx+"]")
		if acc == "long long" && x.Type.DType == tensor.Bool {
			v = "(long long)" + v
		}
		return v
	}
	params := []Param{g.param("y", y, true), g.param("x", x, false)}
	var src strings.Builder
	fmt.Fprintf(&src, "// %s of %v over axes %v\n", n.Op, x.Type, axes)
	// 32 elements or fewer per output: below a warp's width a block per output
	// would leave most of its threads idle, and a serial loop of 32 is short.
	if nRed <= 32 {
		// Few elements each: one thread per output, a serial loop.
		fmt.Fprintf(&src, "extern \"C\" __global__ void __launch_bounds__(256) @KERNEL@(%s) {\n", signature(params))
		src.WriteString(gridStride(it, nOut))
		src.WriteString(coords("k", "i", it, keptShape))
		fmt.Fprintf(&src, "    const %s base = %s;\n", it, offset("k", keptSt))
		fmt.Fprintf(&src, "    %s acc = %s;\n", acc, init)
		fmt.Fprintf(&src, "    for (%s j = 0; j < %d; ++j) {\n", it, nRed)
		src.WriteString(indent(coords("r", "j", it, redShape), 2))
		fmt.Fprintf(&src, "      acc = %s()(acc, (%s)%s);\n", ro.functor, acc, ld("base + "+offset("r", redSt)))
		src.WriteString("    }\n")
		fmt.Fprintf(&src, "    y[i] = %s;\n  }\n}\n", store(g.storageOf(y), final))
		grid, block := flatGrid(nOut)
		g.emit(kernelSpec{op: n.Op.String(), body: src.String(), grid: grid, block: block,
			params: params, args: []int{g.ids[y], g.ids[x]}})
		return nil
	}
	// Trailing reduced dims are one contiguous run per output: 16-byte loads
	// when the run is whole vectors of an f32 or bf16 storage.
	trailing := slices.Equal(redSt, stridesOf(redShape))
	for d := range x.Type.Shape[:len(keptShape)] {
		trailing = trailing && !red[d]
	}
	l := vecLanes(g.storageOf(x), nRed)
	// Vector loads need a contiguous run, and lcc_ld16 widens to float lanes only.
	if !trailing || acc != "float" {
		l = 1
	}
	// At least a warp, at most 256 threads: enough for the tree, small enough that
	// several blocks share an SM.
	bs := pow2(nRed/l, 32, 256)
	fmt.Fprintf(&src, "extern \"C\" __global__ void __launch_bounds__(%d) @KERNEL@(%s) {\n", bs, signature(params))
	fmt.Fprintf(&src, "  __shared__ %s sh[%d];\n", acc, bs)
	// One block per output: blockIdx.x is the output index, split into the kept
	// coordinates k; each thread folds the elements j ≡ threadIdx.x modulo the
	// block (times the lanes), then the block tree combines the threads.
	fmt.Fprintf(&src, "  const %s o = (%s)blockIdx.x;\n", it, it)
	src.WriteString(coords("k", "o", it, keptShape))
	fmt.Fprintf(&src, "  const %s base = %s;\n", it, offset("k", keptSt))
	fmt.Fprintf(&src, "  %s acc = %s;\n", acc, init)
	if l > 1 {
		fmt.Fprintf(&src, "  for (%s j = threadIdx.x * %d; j < %d; j += %d) {\n", it, l, nRed, bs*l)
		fmt.Fprintf(&src, "    float a[%d];\n    lcc_ld16(x + base + j, a);\n", l)
		fmt.Fprintf(&src, "#pragma unroll\n    for (int k = 0; k < %d; ++k) acc = %s()(acc, a[k]);\n", l, ro.functor)
	} else {
		fmt.Fprintf(&src, "  for (%s j = threadIdx.x; j < %d; j += %d) {\n", it, nRed, bs)
		src.WriteString(indent(coords("r", "j", it, redShape), 1))
		fmt.Fprintf(&src, "    acc = %s()(acc, (%s)%s);\n", ro.functor, acc, ld("base + "+offset("r", redSt)))
	}
	src.WriteString("  }\n")
	// A fixed-order tree rather than atomics: the same input always sums to the same
	// bits, so results repeat run to run.
	fmt.Fprintf(&src, "  acc = lcc_block_reduce(acc, sh, %s());\n", ro.functor)
	fmt.Fprintf(&src, "  if (threadIdx.x == 0) y[o] = %s;\n}\n", store(g.storageOf(y), final))
	g.emit(kernelSpec{op: n.Op.String(), body: src.String(), grid: [3]uint32{uint32(nOut), 1, 1},
		block: [3]uint32{uint32(bs), 1, 1}, params: params, args: []int{g.ids[y], g.ids[x]}})
	return nil
}

// indent shifts generated statements right by extra two-space levels.
func indent(s string, extra int) string {
	if s == "" {
		return s
	}
	pad := strings.Repeat("  ", extra)
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		lines[i] = pad + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// softmaxBody views x as [outer, m, inner] and gives each (outer, inner) row a
// block whose threads stride over m; three passes: max, sum of exp, write.
// Subtracting the row max first keeps exp from overflowing for large logits, and
// log_softmax is v − max − log(sum) rather than log(softmax), which would
// underflow to −inf for small probabilities.
// The template expects: %[1]s the op, %[2]d the axis, %[3]s x's type (for
// the comment line), %[4]d M the axis length, %[5]d INNER the product of the
// dims after it, %[6]d LOG 1 for log_softmax, %[7]d the block size (a power
// of two, for lcc_block_reduce), %[8]s the signature (y, then x). The grid is
// outer·inner blocks, one per row.
const softmaxBody = `// %[1]s over axis %[2]d of %[3]s: one block per row
#define M %[4]dLL
#define INNER %[5]dLL
#define LOG %[6]d
extern "C" __global__ void __launch_bounds__(%[7]d) @KERNEL@(%[8]s) {
  __shared__ float sh[%[7]d];
  const long long row = blockIdx.x;
  const long long base = (row / INNER) * M * INNER + row %% INNER;
  float mx = -LCC_INF;
  for (long long j = threadIdx.x; j < M; j += blockDim.x) mx = lcc_max(mx, lcc_tof(x[base + j * INNER]));
  mx = lcc_block_reduce(mx, sh, lcc_op_max());
  float sum = 0.0f;
  for (long long j = threadIdx.x; j < M; j += blockDim.x) sum += lcc_exp(lcc_tof(x[base + j * INNER]) - mx);
  sum = lcc_block_reduce(sum, sh, lcc_op_add());
  const float lse = lcc_log(sum);
  for (long long j = threadIdx.x; j < M; j += blockDim.x) {
    const float v = lcc_tof(x[base + j * INNER]);
    lcc_set(&y[base + j * INNER], LOG ? v - mx - lse : lcc_exp(v - mx) / sum);
  }
}
`

// lowerSoftmax renders softmax and log_softmax, max-subtracted, in fp32.
func lowerSoftmax(g *gen, n *ir.Node) error {
	x, y := n.Args[0], n.Result()
	// The body accumulates in float; an f64 input would silently lose precision.
	if !x.Type.DType.IsFloat() || x.Type.DType == tensor.F64 {
		return fmt.Errorf("needs f32, bf16 or f16, got %v", x.Type)
	}
	ax, err := ir.AxisIndex(n.AttrInt("axis"), x.Type.Rank())
	if err != nil {
		return err
	}
	sh := x.Type.Shape
	outer, m, inner := prod(sh[:ax]), sh[ax], prod(sh[ax+1:])
	// A power of two between a warp and 256 threads: lcc_block_reduce's tree
	// needs a power of two, and a row shorter than 256 uses fewer threads.
	bs := pow2(m, 32, 256)
	logOut := 0
	if n.Op == ir.OpLogSoftmax {
		logOut = 1
	}
	params := []Param{g.param("y", y, true), g.param("x", x, false)}
	body := fmt.Sprintf(softmaxBody, n.Op, ax, x.Type, m, inner, logOut, bs, signature(params))
	g.emit(kernelSpec{op: n.Op.String(), body: body, grid: [3]uint32{uint32(outer * inner), 1, 1},
		block: [3]uint32{uint32(bs), 1, 1}, params: params, args: []int{g.ids[y], g.ids[x]}})
	return nil
}

// normBody is the scalar form of layer_norm and rms_norm: %[8]s applies scale and
// bias, %[9]s the fused residual add. The variance is a second pass over x,
// not E[x²]−E[x]², which cancels badly in fp32.
// The template expects: %[1]s the op, %[2]d M the row length, %[3]s x's type,
// %[4]d RMS (1: rms_norm, no mean), %[5]s EPS as a float literal, %[6]d the
// block size (a power of two), %[7]s the signature (y, x, scale, bias, ra,
// rb), %[8]s the statements that apply scale and bias to v, %[9]s the fused
// residual add's statements or "". The grid is one block per row.
const normBody = `// %[1]s over the last %[2]d elements of %[3]s: one block per row
#define M %[2]dLL
#define RMS %[4]d
#define EPS %[5]s
extern "C" __global__ void __launch_bounds__(%[6]d) @KERNEL@(%[7]s) {
  __shared__ float sh[%[6]d];
  const long long base = (long long)blockIdx.x * M;
%[9]s  float mean = 0.0f;
  if (!RMS) {
    float s = 0.0f;
    for (long long j = threadIdx.x; j < M; j += blockDim.x) s += lcc_tof(x[base + j]);
    mean = lcc_block_reduce(s, sh, lcc_op_add()) / (float)M;
  }
  float ss = 0.0f;
  for (long long j = threadIdx.x; j < M; j += blockDim.x) {
    const float d = lcc_tof(x[base + j]) - mean;
    ss += d * d;
  }
  const float inv = 1.0f / lcc_sqrt(lcc_block_reduce(ss, sh, lcc_op_add()) / (float)M + EPS);
  for (long long j = threadIdx.x; j < M; j += blockDim.x) {
    float v = (lcc_tof(x[base + j]) - mean) * inv;
%[8]s    lcc_set(&y[base + j], v);
  }
}
`

// normVecBody is normBody with 16-byte accesses: L lanes per load and store
// (rows a multiple of L, scale and bias whole rows, x, y, scale and bias of one
// storage dtype).
// normVecBody takes normBody's arguments, with %[8]s applying scale and bias
// to the lanes v[k], %[9]d the lanes L and %[10]s the vector residual add.
const normVecBody = `// %[1]s over the last %[2]d elements of %[3]s: one block per row, %[9]d lanes per access
#define M %[2]dLL
#define L %[9]d
#define RMS %[4]d
#define EPS %[5]s
extern "C" __global__ void __launch_bounds__(%[6]d) @KERNEL@(%[7]s) {
  __shared__ float sh[%[6]d];
  const long long base = (long long)blockIdx.x * M;
  float a[L];
%[10]s  float mean = 0.0f;
  if (!RMS) {
    float s = 0.0f;
    for (int j = threadIdx.x * L; j < M; j += blockDim.x * L) {
      lcc_ld16(x + base + j, a);
#pragma unroll
      for (int k = 0; k < L; ++k) s += a[k];
    }
    mean = lcc_block_reduce(s, sh, lcc_op_add()) / (float)M;
  }
  float ss = 0.0f;
  for (int j = threadIdx.x * L; j < M; j += blockDim.x * L) {
    lcc_ld16(x + base + j, a);
#pragma unroll
    for (int k = 0; k < L; ++k) {
      const float d = a[k] - mean;
      ss += d * d;
    }
  }
  const float inv = 1.0f / lcc_sqrt(lcc_block_reduce(ss, sh, lcc_op_add()) / (float)M + EPS);
  for (int j = threadIdx.x * L; j < M; j += blockDim.x * L) {
    float v[L];
    lcc_ld16(x + base + j, a);
#pragma unroll
    for (int k = 0; k < L; ++k) v[k] = (a[k] - mean) * inv;
%[8]s    lcc_st16(y + base + j, v);
  }
}
`

// normRowBody is normVecBody for rows of at most normRowVectors vectors a
// thread: each thread keeps its CPV vectors of the row in registers, so x is
// read once (the fused residual add's sum never read back), and the sums take
// two barriers each (lcc_block_sum).
// normRowBody takes normBody's arguments, with %[8]s applying scale and bias to
// the lanes v[k] of vector c (column j), %[9]d the lanes L, %[10]s the
// statements that load vector c of the row into xr + c·L (column j), and
// %[11]d CPV.
const normRowBody = `// %[1]s over the last %[2]d elements of %[3]s: one block per row, %[9]d lanes per access, the row in registers
#define M %[2]dLL
#define L %[9]d
#define CPV %[11]d
#define RMS %[4]d
#define EPS %[5]s
extern "C" __global__ void __launch_bounds__(%[6]d) @KERNEL@(%[7]s) {
  __shared__ float sh[32];
  const long long base = (long long)blockIdx.x * M;
  float xr[CPV * L], a[L];
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < CPV; ++c) {
    const int j = (threadIdx.x + c * blockDim.x) * L;
#pragma unroll
    for (int k = 0; k < L; ++k) xr[c * L + k] = 0.0f;
    if (j < M) {
%[10]s    }
#pragma unroll
    for (int k = 0; k < L; ++k) s += xr[c * L + k];
  }
  float mean = 0.0f;
  if (!RMS) mean = lcc_block_sum(s, sh) / (float)M;
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < CPV; ++c) {
    const int j = (threadIdx.x + c * blockDim.x) * L;
    if (j < M) {
#pragma unroll
      for (int k = 0; k < L; ++k) {
        const float d = xr[c * L + k] - mean;
        ss += d * d;
      }
    }
  }
  const float inv = 1.0f / lcc_sqrt(lcc_block_sum(ss, sh) / (float)M + EPS);
#pragma unroll
  for (int c = 0; c < CPV; ++c) {
    const int j = (threadIdx.x + c * blockDim.x) * L;
    if (j < M) {
      float v[L];
#pragma unroll
      for (int k = 0; k < L; ++k) v[k] = (xr[c * L + k] - mean) * inv;
%[8]s      lcc_st16(y + base + j, v);
    }
  }
}
`

// normRowVectors bounds normRowBody's vectors a thread (its registers).
const normRowVectors = 8

// normLanes is the lanes of normVecBody for n, or 0 when it does not apply.
func normLanes(g *gen, n *ir.Node, dims []int64) int64 {
	dt := g.storageOf(n.Args[0])
	l := vecLanes(dt, prod(dims))
	if l == 1 || g.storageOf(n.Result()) != dt || prod(dims)/l > 1<<20 {
		return 0
	}
	vals := n.Args[1:]
	// A fused residual's operands are loaded with the same 16-byte accesses, so they
	// must meet the same conditions.
	if add := g.resid[n]; add != nil {
		vals = append(vals, add.Args...)
	}
	for _, p := range vals {
		if !slices.Equal(p.Type.Shape[len(p.Type.Shape)-len(dims):], dims) || g.storageOf(p) != dt {
			return 0
		}
	}
	return l
}

// lowerNorm renders layer_norm (x − mean)·r·scale + bias and rms_norm x·r·scale
// with r = 1/√(var + eps) over dims axis..rank−1; scale and bias broadcast onto
// those dims.
func lowerNorm(g *gen, n *ir.Node) error {
	x, y := n.Args[0], n.Result()
	ax, err := ir.AxisIndex(n.AttrInt("axis"), x.Type.Rank())
	if err != nil {
		return err
	}
	dims := x.Type.Shape[ax:]
	m := prod(dims)
	rows := prod(x.Type.Shape[:ax])
	// A residual add feeding the norm (residual.go) runs first in the same
	// kernel: each thread writes x = ra + rb for the columns it reads back.
	add := g.resid[n]
	// x is writable only when the fused residual add stores its sum there: the sum
	// is a value of the graph, and its other readers find it in x.
	params := []Param{g.param("y", y, true), g.param("x", x, add != nil)}
	args := []int{g.ids[y], g.ids[x]}
	pre, preVec := "", ""
	if add != nil {
		params = append(params, g.param("ra", add.Args[0], false), g.param("rb", add.Args[1], false))
		args = append(args, g.ids[add.Args[0]], g.ids[add.Args[1]])
		pre = "  for (long long j = threadIdx.x; j < M; j += blockDim.x)\n" +
			"    lcc_set(&x[base + j], lcc_tof(ra[base + j]) + lcc_tof(rb[base + j]));\n"
		preVec = "  for (int j = threadIdx.x * L; j < M; j += blockDim.x * L) {\n" +
			"    float b[L];\n    lcc_ld16(ra + base + j, a);\n    lcc_ld16(rb + base + j, b);\n" +
			"#pragma unroll\n    for (int k = 0; k < L; ++k) a[k] += b[k];\n    lcc_st16(x + base + j, a);\n  }\n"
	}
	var apply strings.Builder
	for i, p := range n.Args[1:] {
		name := []string{"scale", "bias"}[i]
		// Inserted after y and x so the parameter order is y, x, scale, bias, ra, rb
		// whatever the node has.
		params = slices.Insert(params, 2+i, g.param(name, p, false))
		args = slices.Insert(args, 2+i, g.ids[p])
		op := []string{"*=", "+="}[i]
		// The three forms of a scale or bias: a whole row (the usual [hidden]), one
		// value for the row, or a broadcast through strides over the row's dims.
		switch {
		case slices.Equal(p.Type.Shape, dims):
			fmt.Fprintf(&apply, "    v %s lcc_tof(%s[j]);\n", op, name)
		case p.Type.Numel() == 1:
			fmt.Fprintf(&apply, "    v %s lcc_tof(%s[0]);\n", op, name)
		default:
			apply.WriteString("    {\n" + indent(coords("d", "j", "long long", dims), 1))
			fmt.Fprintf(&apply, "      v %s lcc_tof(%s[%s]);\n    }\n", op, name,
				offset("d", bcastStrides(p.Type.Shape, dims)))
		}
	}
	rms := 0
	if n.Op == ir.OpRMSNorm {
		rms = 1
	}
	// The vector body needs scale and bias as whole rows (normLanes checks), so it
	// rebuilds apply with vector loads instead of the broadcast forms above.
	if l := normLanes(g, n, dims); l > 0 {
		var apply strings.Builder
		for i := range n.Args[1:] {
			name := []string{"scale", "bias"}[i]
			fmt.Fprintf(&apply, "    lcc_ld16(%s + j, a);\n#pragma unroll\n    for (int k = 0; k < L; ++k) v[k] %s a[k];\n",
				name, []string{"*=", "+="}[i])
		}
		bs := pow2(m/l, 32, 256)
		if cpv := (m/l + bs - 1) / bs; cpv <= normRowVectors {
			// The row in registers: x (or the residual's operands, their sum stored to
			// x) loaded once.
			load := "      lcc_ld16(x + base + j, xr + c * L);\n"
			if add != nil {
				load = "      lcc_ld16(ra + base + j, xr + c * L);\n      lcc_ld16(rb + base + j, a);\n" +
					"#pragma unroll\n      for (int k = 0; k < L; ++k) xr[c * L + k] += a[k];\n" +
					"      lcc_st16(x + base + j, xr + c * L);\n"
			}
			body := fmt.Sprintf(normRowBody, n.Op, m, x.Type, rms, clit.Float(n.AttrFloat("eps")), bs,
				signature(params), indent(apply.String(), 1), l, load, cpv)
			g.emit(kernelSpec{op: n.Op.String(), body: body, grid: [3]uint32{uint32(rows), 1, 1},
				block: [3]uint32{uint32(bs), 1, 1}, params: params, args: args})
			return nil
		}
		body := fmt.Sprintf(normVecBody, n.Op, m, x.Type, rms, clit.Float(n.AttrFloat("eps")), bs,
			signature(params), apply.String(), l, preVec)
		g.emit(kernelSpec{op: n.Op.String(), body: body, grid: [3]uint32{uint32(rows), 1, 1},
			block: [3]uint32{uint32(bs), 1, 1}, params: params, args: args})
		return nil
	}
	bs := pow2(m, 32, 256)
	body := fmt.Sprintf(normBody, n.Op, m, x.Type, rms, clit.Float(n.AttrFloat("eps")), bs,
		signature(params), apply.String(), pre)
	g.emit(kernelSpec{op: n.Op.String(), body: body, grid: [3]uint32{uint32(rows), 1, 1},
		block: [3]uint32{uint32(bs), 1, 1}, params: params, args: args})
	return nil
}

// lowerCumSum is one thread per line along the axis, a serial running sum in
// fp32 (int64 for integers); exclusive and reverse as in ONNX CumSum.
// One thread per line keeps the sum's order that of the axis, as a sequential
// reference computes it; lines are independent, so parallelism comes from outer·inner.
func lowerCumSum(g *gen, n *ir.Node) error {
	x, y := n.Args[0], n.Result()
	ax, err := ir.AxisIndex(n.AttrInt("axis"), x.Type.Rank())
	if err != nil {
		return err
	}
	sh := x.Type.Shape
	outer, m, inner := prod(sh[:ax]), sh[ax], prod(sh[ax+1:])
	acc := accC(x.Type.DType)
	excl, rev := n.AttrBool("exclusive"), n.AttrBool("reverse")
	jexpr := "jj"
	if rev {
		jexpr = fmt.Sprintf("(%d - 1 - jj)", m)
	}
	// s accumulates in fp32 (int64 for integers) and each y[k] stores the
	// running sum rounded, as the interpreter's rounding of the result does.
	step := fmt.Sprintf("s += (%s)%s; y[k] = %s;", acc, load(g.storageOf(x), "x[k]"), store(g.storageOf(y), "s"))
	// Exclusive writes the sum before adding the element, so y[0] is 0.
	if excl {
		step = fmt.Sprintf("y[k] = %s; s += (%s)%s;", store(g.storageOf(y), "s"), acc, load(g.storageOf(x), "x[k]"))
	}
	params := []Param{g.param("y", y, true), g.param("x", x, false)}
	var src strings.Builder
	fmt.Fprintf(&src, "// cumsum over axis %d of %v\n", ax, x.Type)
	fmt.Fprintf(&src, "extern \"C\" __global__ void __launch_bounds__(256) @KERNEL@(%s) {\n", signature(params))
	src.WriteString(gridStride("long long", outer*inner))
	fmt.Fprintf(&src, "    const long long o = i / %d, in = i %% %d;\n", inner, inner)
	fmt.Fprintf(&src, "    %s s = 0;\n", acc)
	fmt.Fprintf(&src, "    for (long long jj = 0; jj < %d; ++jj) {\n", m)
	fmt.Fprintf(&src, "      const long long k = (o * %d + %s) * %d + in;\n", m, jexpr, inner)
	fmt.Fprintf(&src, "      %s\n    }\n  }\n}\n", step)
	grid, block := flatGrid(outer * inner)
	g.emit(kernelSpec{op: "cumsum", body: src.String(), grid: grid, block: block, params: params,
		args: []int{g.ids[y], g.ids[x]}})
	return nil
}
