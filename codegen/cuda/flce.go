package cuda

import (
	"fmt"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Fused linear cross-entropy runs in chunks of rows (ir/ops_fused.go), so the
// [N, V] logits never exist: per chunk of R rows, one cuBLASLt GEMM writes the
// chunk's logits z = h_c·op(w) into one [R, V] scratch buffer, and one kernel (one
// block per row) finds each row's log-sum-exp online in a single sweep.
//
//   - The forward writes each row's loss and whether it counts; a fold kernel sums
//     them in a fixed order (mean over rows not ignored, as PyTorch).
//   - The backward recomputes the chunk's logits and overwrites them in place with
//     G = c·(softmax(z) − onehot(label)), c the row's loss cotangent (0 on an
//     ignored row). Then dh_c = G·op(w)ᵀ by GEMM, and dw += (h_cᵀ·G or Gᵀ·h_c) by a
//     GEMM with beta = 1 after the first chunk. With bf16 storage dw accumulates in
//     an fp32 scratch and is rounded once at the end.
//
// The scratch is one chunk of logits plus, in bf16, dw in fp32 and two floats per
// row: R is chosen so that the chunk fits CEChunkBytes, unless the op's chunk_rows
// says otherwise. The chunk loop reuses one kernel per chunk size: the chunk's row
// offset is a per-launch argument offset (Step.Offs), not part of the source.

// CEChunkBytes is the byte budget of the fused cross-entropy's chunk of logits on
// the GPU: 512 MiB, so the whole extra memory stays under 1 GiB for V ≤ 64K.
const CEChunkBytes = 512 << 20

// flceCountBody counts the rows whose label is not ignored (for the mean).
const flceCountBody = `// fused_linear_cross_entropy_grad: rows not ignored among %[1]d
#define N %[1]dLL
#define HAS_IGNORE %[2]d
#define IGNORE %[3]s
extern "C" __global__ void __launch_bounds__(1024) @KERNEL@(%[4]s) {
  __shared__ float sh[1024];
  float c = 0.0f;
  for (long long r = threadIdx.x; r < N; r += blockDim.x) c += (HAS_IGNORE && (long long)labels[r] == IGNORE) ? 0.0f : 1.0f;
  c = lcc_block_reduce(c, sh, lcc_op_add());
  if (threadIdx.x == 0) cnt[0] = c;
}
`

// flceRowBody is one row of a chunk of logits per block. MODE 0 writes the row's
// loss and count (for a mean or sum fold), MODE 1 the loss alone (reduction none),
// MODE 2 overwrites the row with c·(softmax − onehot). DMODE says where c comes
// from: dloss per row (none), dloss[0] (sum) or dloss[0] / cnt[0] (mean). The
// log-sum-exp is online (Milakov and Gimelshein): each thread keeps a running max
// m and sum s of exp(z − m) over its 16-byte vectors, and the block combines the
// pairs in a fixed tree.
const flceRowBody = `// fused_linear_cross_entropy %[1]s: rows of %[2]s logits, one block per row
#define V %[3]dLL
#define HAS_IGNORE %[4]d
#define IGNORE %[5]s
#define MODE %[6]d
#define DMODE %[7]d
#define VEC %[8]d
#define NT %[9]d
#define LOG2E 1.4426950408889634f
typedef %[10]s ZT;
__device__ __forceinline__ void flce_ld(const ZT* p, float* x) {
#if VEC > 1
  lcc_ld16(p, x);
#else
  x[0] = lcc_tof(*p);
#endif
}
__device__ __forceinline__ void flce_st(ZT* p, const float* x) {
#if VEC > 1
  lcc_st16(p, x);
#else
  lcc_set(p, x[0]);
#endif
}
// flce_merge folds (m2, s2) into (m, s): s·2^(m·log2e) + s2·2^(m2·log2e) at the larger max.
__device__ __forceinline__ void flce_merge(float& m, float& s, float m2, float s2) {
  const float mx = lcc_max(m, m2);
  if (mx == -LCC_INF) return;
  s = (m == -LCC_INF ? 0.0f : s * exp2f((m - mx) * LOG2E)) + (m2 == -LCC_INF ? 0.0f : s2 * exp2f((m2 - mx) * LOG2E));
  m = mx;
}
extern "C" __global__ void __launch_bounds__(NT) @KERNEL@(%[11]s) {
  __shared__ float shm[NT / 32], shs[NT / 32];
  const long long r = blockIdx.x;
  ZT* zr = (ZT*)z + r * V;
  const long long l = (long long)labels[r];
  const bool ign = HAS_IGNORE && l == IGNORE;
  const bool ok = l >= 0 && l < V;
#if MODE == 2
#if DMODE == 0
  float c = lcc_tof(dloss[r]);
#elif DMODE == 1
  float c = lcc_tof(dloss[0]);
#else
  float c = lcc_tof(dloss[0]) / cnt[0];
#endif
  if (ign) {
    float zero[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) zero[k] = 0.0f;
    for (long long i = threadIdx.x; i < V / VEC; i += NT) flce_st(zr + i * VEC, zero);
    return;
  }
  if (!ok) c = LCC_NAN;
#else
  if (ign) {
    if (threadIdx.x == 0) {
      lcc_set(&loss[r], 0.0f);
#if MODE == 0
      cnt[r] = 0.0f;
#endif
    }
    return;
  }
#endif
  float m = -LCC_INF, s = 0.0f;
  for (long long i = threadIdx.x; i < V / VEC; i += NT) {
    float x[VEC];
    flce_ld(zr + i * VEC, x);
    float mx = x[0];
#pragma unroll
    for (int k = 1; k < VEC; ++k) mx = lcc_max(mx, x[k]);
    float t = 0.0f;
    const float ref = lcc_max(m, mx);
    if (ref != -LCC_INF) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) t += exp2f((x[k] - ref) * LOG2E);
      s = (m == -LCC_INF ? 0.0f : s * exp2f((m - ref) * LOG2E)) + t;
    }
    m = ref;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    flce_merge(m, s, m2, s2);
  }
  if ((threadIdx.x & 31) == 0) { shm[threadIdx.x >> 5] = m; shs[threadIdx.x >> 5] = s; }
  __syncthreads();
  m = shm[0]; s = shs[0];
  for (int w = 1; w < NT / 32; ++w) flce_merge(m, s, shm[w], shs[w]);
  // lse = m + log(s); an infinite max is the lse itself.
  const float lse = (m == LCC_INF || m == -LCC_INF) ? m : m + lcc_log(s);
#if MODE == 2
  const float lse2 = lse * LOG2E;
  for (long long i = threadIdx.x; i < V / VEC; i += NT) {
    float x[VEC];
    flce_ld(zr + i * VEC, x);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float p = exp2f(x[k] * LOG2E - lse2);
      x[k] = c * (p - (i * VEC + k == l ? 1.0f : 0.0f));
    }
    flce_st(zr + i * VEC, x);
  }
#else
  if (threadIdx.x == 0) {
    lcc_set(&loss[r], ok ? lse - lcc_tof(zr[l]) : LCC_NAN);
#if MODE == 0
    cnt[r] = 1.0f;
#endif
  }
#endif
}
`

// flceChunk is the number of rows per chunk: the op's chunk_rows, or as many rows
// of v logits of es bytes as fit CEChunkBytes (a multiple of 128 when that is
// at least 128, so chunk offsets keep GEMM operands aligned).
func flceChunk(n *ir.Node, rows, v, es int64) int64 {
	c := n.AttrInt("chunk_rows")
	if c <= 0 {
		c = max(1, CEChunkBytes/max(1, v*es))
		if c >= 128 {
			c = c / 128 * 128
		}
	}
	return max(1, min(c, rows))
}

// flceSetup checks the operands and returns the dims, the storage dtype and the
// chunk rows.
func (g *gen) flceSetup(n *ir.Node) (rows, d, v, chunk int64, dt tensor.DType, err error) {
	h, w, labels := n.Args[0], n.Args[1], n.Args[2]
	rows, d, v, err = ir.FLCEDims(h.Type, w.Type, labels.Type, n.AttrBool("transpose_w"))
	if err != nil {
		return 0, 0, 0, 0, 0, err
	}
	dt = g.storageOf(h)
	if dt != g.storageOf(w) || (dt != tensor.F32 && dt != tensor.BF16 && dt != tensor.F16) {
		return 0, 0, 0, 0, 0, fmt.Errorf("h and w stored as %v and %v: want one of f32, bf16, f16",
			dt, g.storageOf(w))
	}
	return rows, d, v, flceChunk(n, rows, v, int64(dt.Size())), dt, nil
}

// flceLogits appends the GEMM z[:c] = h[r0:r0+c]·op(w).
func (g *gen) flceLogits(n *ir.Node, z int, r0, c, d, v int64, dt tensor.DType) {
	h, w := n.Args[0], n.Args[1]
	g.gemm(g.ids[h], g.ids[w], z, Gemm{TransB: n.AttrBool("transpose_w"), M: c, N: v, K: d,
		Batch: 1, OffA: r0 * d, DType: dt.String(), Alpha: 1})
}

// flceRows emits the row kernel for a chunk of c rows starting at row r0. params
// and args list the kernel's parameters after z (whose buffer is zID); offs gives
// their element offsets.
func (g *gen) flceRows(n *ir.Node, mode, dmode int, zID int, zc string, r0, c, v int64,
	params []Param, args []int, offs []int64, what string) {
	ign, hasIgnore := n.Attrs.Get("ignore_index")
	iv, _ := ign.(int64)
	vec := vecLanes(map[string]tensor.DType{"float": tensor.F32, "lcc_bf16": tensor.BF16}[zc], v)
	nt := pow2(v/vec, 32, 512)
	ps := append([]Param{{Name: "z", CType: zc, Out: mode == 2}}, params...)
	body := fmt.Sprintf(flceRowBody, what, fmt.Sprintf("%s[%d]", zc, v), v,
		b2i(hasIgnore && ign != nil), ilit(iv), mode, dmode, vec, nt, zc, signature(ps))
	g.emit(kernelSpec{op: n.Op.String() + "." + what, body: body, grid: [3]uint32{uint32(c), 1, 1},
		block: [3]uint32{uint32(nt), 1, 1}, params: ps, args: append([]int{zID}, args...),
		offs: append([]int64{0}, offs...)})
}

// gemm appends a GEMM step.
func (g *gen) gemm(a, b, c int, gm Gemm) {
	g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "gemm", Node: g.node, Op: "matmul",
		Args: []int{a, b, c}, Gemm: &gm})
}

// lowerFLCE is the forward: per chunk the logits GEMM and the loss rows, then the
// fold for mean and sum.
func lowerFLCE(g *gen, n *ir.Node) error {
	rows, d, v, chunk, dt, err := g.flceSetup(n)
	if err != nil || rows == 0 || v == 0 {
		return err
	}
	labels, y := n.Args[2], n.Result()
	zc := storageC[dt]
	z := g.temp(dt, chunk, v)
	red := n.AttrString("reduction")
	var lossID, cntID int
	if red == "none" {
		lossID = g.ids[y]
	} else {
		lossID, cntID = g.temp(tensor.F32, rows), g.temp(tensor.F32, rows)
	}
	for r0 := int64(0); r0 < rows; r0 += chunk {
		c := min(chunk, rows-r0)
		g.flceLogits(n, z, r0, c, d, v, dt)
		if red == "none" {
			g.flceRows(n, 1, 0, z, zc, r0, c, v, []Param{g.param("loss", y, true),
				g.param("labels", labels, false)}, []int{lossID, g.ids[labels]}, []int64{r0, r0}, "loss")
			continue
		}
		g.flceRows(n, 0, 0, z, zc, r0, c, v, []Param{{Name: "loss", CType: "float", Out: true},
			{Name: "cnt", CType: "float", Out: true}, g.param("labels", labels, false)},
			[]int{lossID, cntID, g.ids[labels]}, []int64{r0, r0, r0}, "loss")
	}
	if red == "none" {
		return nil
	}
	params := []Param{g.param("y", y, true), {Name: "loss", CType: "float"}, {Name: "cnt", CType: "float"}}
	body := fmt.Sprintf(lossSumBody, n.Op, red, rows, b2i(red == "mean"), 256, signature(params))
	g.emit(kernelSpec{op: n.Op.String() + ".sum", body: body, grid: [3]uint32{1, 1, 1},
		block: [3]uint32{256, 1, 1}, params: params, args: []int{g.ids[y], lossID, cntID}})
	return nil
}

// flceCastBody rounds the fp32 dw accumulator into dw's storage.
const flceCastBody = "    lcc_set(&y[i], x[i]);\n"

// lowerFLCEGrad is the backward: per chunk the logits again, G in place, dh_c and
// dw += by GEMM.
func lowerFLCEGrad(g *gen, n *ir.Node) error {
	rows, d, v, chunk, dt, err := g.flceSetup(n)
	if err != nil {
		return err
	}
	if rows == 0 || v == 0 || d == 0 {
		return fmt.Errorf("fused_linear_cross_entropy_grad with an empty dim (N=%d, d=%d, V=%d) is not supported on the GPU", rows, d, v)
	}
	h, w, labels, dloss := n.Args[0], n.Args[1], n.Args[2], n.Args[3]
	dh, dw := n.Results[0], n.Results[1]
	tw := n.AttrBool("transpose_w")
	ign, hasIgnore := n.Attrs.Get("ignore_index")
	iv, _ := ign.(int64)
	red := n.AttrString("reduction")
	dmode := map[string]int{"none": 0, "sum": 1, "mean": 2}[red]
	cnt := g.temp(tensor.F32, 1)
	if dmode == 2 {
		params := []Param{{Name: "cnt", CType: "float", Out: true}, g.param("labels", labels, false)}
		g.emit(kernelSpec{op: n.Op.String() + ".count", body: fmt.Sprintf(flceCountBody, rows,
			b2i(hasIgnore && ign != nil), ilit(iv), signature(params)), grid: [3]uint32{1, 1, 1},
			block: [3]uint32{1024, 1, 1}, params: params, args: []int{cnt, g.ids[labels]}})
	}
	zc := storageC[dt]
	z := g.temp(dt, chunk, v)
	// dw accumulates in fp32: in place when it is stored so, else in a scratch.
	acc, ctype := g.ids[dw], ""
	if dt != tensor.F32 {
		acc, ctype = g.temp(tensor.F32, dw.Type.Shape...), "f32"
	}
	dts := dt.String()
	for r0 := int64(0); r0 < rows; r0 += chunk {
		c := min(chunk, rows-r0)
		g.flceLogits(n, z, r0, c, d, v, dt)
		params := []Param{g.param("labels", labels, false), g.param("dloss", dloss, false)}
		args := []int{g.ids[labels], g.ids[dloss]}
		offs := []int64{r0, 0}
		if dmode == 0 {
			offs[1] = r0
		}
		if dmode == 2 {
			params = append(params, Param{Name: "cnt", CType: "float"})
			args, offs = append(args, cnt), append(offs, 0)
		}
		g.flceRows(n, 2, dmode, z, zc, r0, c, v, params, args, offs, "grad")
		// dh[r0:r0+c] [c, d] = G [c, V] · op(w)ᵀ: w [d, V] is op(w)ᵀ stored transposed.
		g.gemm(z, g.ids[w], g.ids[dh], Gemm{TransB: !tw, M: c, N: d, K: v, Batch: 1, OffC: r0 * d,
			DType: dts, Alpha: 1})
		beta := float32(0)
		if r0 > 0 {
			beta = 1
		}
		if tw { // dw [V, d] += Gᵀ · h_c
			g.gemm(z, g.ids[h], acc, Gemm{TransA: true, M: v, N: d, K: c, Batch: 1, OffB: r0 * d,
				DType: dts, CType: ctype, Alpha: 1, Beta: beta})
		} else { // dw [d, V] += h_cᵀ · G
			g.gemm(g.ids[h], z, acc, Gemm{TransA: true, M: d, N: v, K: c, Batch: 1, OffA: r0 * d,
				DType: dts, CType: ctype, Alpha: 1, Beta: beta})
		}
	}
	if acc != g.ids[dw] {
		g.flatKernel(n.Op.String()+".dw", fmt.Sprintf("fused_linear_cross_entropy_grad: dw %v from fp32", dw.Type),
			dw.Type.Numel(), []Param{g.param("y", dw, true), {Name: "x", CType: "float"}},
			[]int{g.ids[dw], acc}, flceCastBody)
	}
	return nil
}
