package cuda

import (
	"fmt"
	"strings"

	"github.com/lcc-dev/lcc/codegen/cuda/clit"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// attnCommon is shared by the attention kernels: sizes, index helpers, the mask,
// and the key sets. key_range(t, h, br) is the keys query row t of head h sees in
// branch br, in the CPU reference's order; query_range(j, h, br) is the query rows
// that see key j, which lets a warp own dk and dv of one key without atomics.
// (NVRTC 11.8 defaults to C++03, so the kernels use no lambdas.) Dense attention is one key range ([0, t] when causal); dilated
// attention visits each LongNet branch's strided key set in turn, which is one
// softmax over their union with multiplicity, exactly what merging the branches by
// their log-sum-exp computes (docs/design.md §3, interp/attention).
const attnCommon = `#define AT_B %[1]dLL
#define AT_T %[2]dLL
#define AT_S %[3]dLL
#define AT_HQ %[4]d
#define AT_HKV %[5]d
#define AT_D %[6]d
#define AT_DPL ((AT_D + 31) / 32)
#define AT_G (AT_HQ / AT_HKV)
#define AT_SCALE %[7]s
#define AT_CAUSAL %[8]d
#define AT_DILATED %[9]d
#define AT_NB %[10]d
#define AT_OFFSETS_BLOCK %[11]d
#define AT_HAS_MASK %[12]d
#define AT_MASK_FLOAT %[13]d
#define AT_MASK_DOCS %[22]d
#define AT_WIN %[23]dLL
#define AT_MS0 %[14]dLL
#define AT_MS1 %[15]dLL
#define AT_MS2 %[16]dLL
#define AT_MS3 %[17]dLL
typedef %[18]s QT;
typedef %[19]s MT;
static __device__ const long long AT_BR_W[AT_NB] = {%[20]s};
static __device__ const int AT_BR_R[AT_NB] = {%[21]s};
__device__ __forceinline__ long long q_at(long long b, long long t, int h) { return ((b * AT_T + t) * AT_HQ + h) * (long long)AT_D; }
__device__ __forceinline__ long long kv_at(long long b, long long j, int hk) { return ((b * AT_S + j) * AT_HKV + hk) * (long long)AT_D; }
__device__ __forceinline__ long long lse_at(long long b, int h, long long t) { return (b * AT_HQ + h) * AT_T + t; }
__device__ __forceinline__ int head_offset(int h, int r) {
  return lcc_head_offset(h, AT_HQ, r, AT_OFFSETS_BLOCK);
}
// mask_bias is the additive mask of (b, h, t, j): a float mask is added, a bool
// or integer mask hides the key where it is 0, and doc starts (packed documents,
// ir/docs.go) hide the keys before the query's document.
__device__ __forceinline__ float mask_bias(const MT* mask, long long b, int h, long long t, long long j) {
#if AT_HAS_MASK
  const MT m = mask[b * AT_MS0 + h * AT_MS1 + t * AT_MS2 + j * AT_MS3];
#if AT_MASK_DOCS
  return j >= (long long)m ? 0.0f : -LCC_INF;
#elif AT_MASK_FLOAT
  return lcc_tof(m);
#else
  return m != 0 ? 0.0f : -LCC_INF;
#endif
#else
  return 0.0f;
#endif
}
// key_range gives the keys query row t of head h sees in branch br as the
// progression lo, lo+step, ... < hi; false when the branch does not select t.
__device__ __forceinline__ bool key_range(long long t, int h, int br, long long* lo, int* step, long long* hi) {
#if AT_DILATED
  const long long w = AT_BR_W[br];
  const int r = AT_BR_R[br], off = head_offset(h, r);
  const long long start = t / w * w;
  if ((t - start) %% r != off) return false;
  *hi = (AT_T - start > w) ? start + w : AT_T;
  if (AT_CAUSAL) *hi = t + 1;
  *lo = start + off;
  *step = r;
#else
  // A sliding window of AT_WIN keys (ir/window.go) starts the range at t − W + 1.
  *lo = AT_WIN > 0 && t >= AT_WIN ? t - AT_WIN + 1 : 0;
  *step = 1;
  *hi = AT_CAUSAL ? (t + 1 < AT_S ? t + 1 : AT_S) : AT_S;
#endif
  return true;
}
// query_range is the inverse: the query rows of head h that see key j in branch br.
__device__ __forceinline__ bool query_range(long long j, int h, int br, long long* lo, int* step, long long* hi) {
#if AT_DILATED
  const long long w = AT_BR_W[br];
  const int r = AT_BR_R[br], off = head_offset(h, r);
  const long long start = j / w * w;
  if ((j - start) %% r != off) return false;
  *hi = (AT_T - start > w) ? start + w : AT_T;
  *lo = AT_CAUSAL ? j : start + off;
  *step = r;
#else
  *lo = AT_CAUSAL ? j : 0;
  *step = 1;
  *hi = AT_WIN > 0 && j + AT_WIN < AT_T ? j + AT_WIN : AT_T;  // the last query whose window holds j
#endif
  return true;
}
// dot is q·x over the head dim, split over the warp's lanes and summed in a fixed
// butterfly, so every lane holds the same value.
__device__ __forceinline__ float dot_row(const float* a, const QT* x, long long xo, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < AT_DPL; ++c) {
    const int d = lane + 32 * c;
    if (d < AT_D) s += a[c] * lcc_tof(x[xo + d]);
  }
  return lcc_warp_sum(s);
}
__device__ __forceinline__ void load_row(float* a, const QT* x, long long xo, int lane) {
#pragma unroll
  for (int c = 0; c < AT_DPL; ++c) {
    const int d = lane + 32 * c;
    a[c] = d < AT_D ? lcc_tof(x[xo + d]) : 0.0f;
  }
}
`

// attnForward: one warp per query row, four rows (a query tile) per block of
// (tile, head, batch); online softmax in fp32.
const attnForward = `extern "C" __global__ void __launch_bounds__(128) @KERNEL@(%s) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long t = (long long)blockIdx.x * 4 + warp;
  const int h = blockIdx.y, hk = h / AT_G;
  const long long b = blockIdx.z;
  if (t >= AT_T) return;
  float qv[AT_DPL], acc[AT_DPL];
  const long long qo = q_at(b, t, h);
  load_row(qv, q, qo, lane);
#pragma unroll
  for (int c = 0; c < AT_DPL; ++c) acc[c] = 0.0f;
  float m = -LCC_INF, l = 0.0f;
  for (int br = 0; br < AT_NB; ++br) {
    long long lo, hi;
    int step;
    if (!key_range(t, h, br, &lo, &step, &hi)) continue;
    for (long long j = lo; j < hi; j += step) {
    const long long ko = kv_at(b, j, hk);
    const float s = dot_row(qv, k, ko, lane) * AT_SCALE + mask_bias(MASK_ARG, b, h, t, j);
    if (s == -LCC_INF) continue;
    const float mn = lcc_max(m, s);
    const float corr = lcc_exp(m - mn), p = lcc_exp(s - mn);
    l = l * corr + p;
#pragma unroll
    for (int c = 0; c < AT_DPL; ++c) {
      const int d = lane + 32 * c;
      if (d < AT_D) acc[c] = acc[c] * corr + p * lcc_tof(v[ko + d]);
    }
    m = mn;
    }
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int c = 0; c < AT_DPL; ++c) {
    const int d = lane + 32 * c;
    if (d < AT_D) lcc_set(&o[qo + d], acc[c] * inv);
  }
  if (lane == 0) lcc_set(&lse[lse_at(b, h, t)], l > 0.0f ? m + lcc_log(l) : -LCC_INF);
}
`

// attnDelta is delta = rowsum(dO ⊙ O), the FlashAttention-2 backward's D.
const attnDelta = `extern "C" __global__ void __launch_bounds__(128) @KERNEL@(%s) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long t = (long long)blockIdx.x * 4 + warp;
  const int h = blockIdx.y;
  const long long b = blockIdx.z;
  if (t >= AT_T) return;
  float ov[AT_DPL];
  load_row(ov, o, q_at(b, t, h), lane);
  const float s = dot_row(ov, dout, q_at(b, t, h), lane);
  if (lane == 0) delta[lse_at(b, h, t)] = s;
}
`

// attnDQ: dq = Σ_j scale·P·(dP − delta)·k_j per query row, P = exp(s − lse).
const attnDQ = `extern "C" __global__ void __launch_bounds__(128) @KERNEL@(%s) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long t = (long long)blockIdx.x * 4 + warp;
  const int h = blockIdx.y, hk = h / AT_G;
  const long long b = blockIdx.z;
  if (t >= AT_T) return;
  const long long qo = q_at(b, t, h);
  float qv[AT_DPL], dov[AT_DPL], acc[AT_DPL];
  load_row(qv, q, qo, lane);
  load_row(dov, dout, qo, lane);
#pragma unroll
  for (int c = 0; c < AT_DPL; ++c) acc[c] = 0.0f;
  const float l = lcc_tof(lse[lse_at(b, h, t)]);
  const float dl = delta[lse_at(b, h, t)];
  if (l != -LCC_INF) {
    for (int br = 0; br < AT_NB; ++br) {
      long long lo, hi;
      int step;
      if (!key_range(t, h, br, &lo, &step, &hi)) continue;
      for (long long j = lo; j < hi; j += step) {
      const long long ko = kv_at(b, j, hk);
      const float s = dot_row(qv, k, ko, lane) * AT_SCALE + mask_bias(MASK_ARG, b, h, t, j);
      const float p = lcc_exp(s - l);
      if (p == 0.0f) continue;
      const float dp = dot_row(dov, v, ko, lane);
      const float ds = AT_SCALE * p * (dp - dl);
#pragma unroll
      for (int c = 0; c < AT_DPL; ++c) {
        const int d = lane + 32 * c;
        if (d < AT_D) acc[c] += ds * lcc_tof(k[ko + d]);
      }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < AT_DPL; ++c) {
    const int d = lane + 32 * c;
    if (d < AT_D) lcc_set(&dq[qo + d], acc[c]);
  }
}
`

// attnDKDV: one warp per key row of a kv head owns its dk and dv and visits the
// query heads of its group, then the queries that see the key, in order: no
// atomics, deterministic.
const attnDKDV = `extern "C" __global__ void __launch_bounds__(128) @KERNEL@(%s) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long j = (long long)blockIdx.x * 4 + warp;
  const int hk = blockIdx.y;
  const long long b = blockIdx.z;
  if (j >= AT_S) return;
  const long long ko = kv_at(b, j, hk);
  float kv[AT_DPL], vv[AT_DPL], dka[AT_DPL], dva[AT_DPL];
  load_row(kv, k, ko, lane);
  load_row(vv, v, ko, lane);
#pragma unroll
  for (int c = 0; c < AT_DPL; ++c) { dka[c] = 0.0f; dva[c] = 0.0f; }
  for (int h = hk * AT_G; h < (hk + 1) * AT_G; ++h) {
    for (int br = 0; br < AT_NB; ++br) {
      long long lo, hi;
      int step;
      if (!query_range(j, h, br, &lo, &step, &hi)) continue;
      for (long long t = lo; t < hi; t += step) {
      const float l = lcc_tof(lse[lse_at(b, h, t)]);
      if (l == -LCC_INF) continue;
      const long long qo = q_at(b, t, h);
      const float s = dot_row(kv, q, qo, lane) * AT_SCALE + mask_bias(MASK_ARG, b, h, t, j);
      const float p = lcc_exp(s - l);
      if (p == 0.0f) continue;
      const float dp = dot_row(vv, dout, qo, lane);
      const float ds = AT_SCALE * p * (dp - delta[lse_at(b, h, t)]);
#pragma unroll
      for (int c = 0; c < AT_DPL; ++c) {
        const int d = lane + 32 * c;
        if (d < AT_D) {
          dva[c] += p * lcc_tof(dout[qo + d]);
          dka[c] += ds * lcc_tof(q[qo + d]);
        }
      }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < AT_DPL; ++c) {
    const int d = lane + 32 * c;
    if (d < AT_D) { lcc_set(&dk[ko + d], dka[c]); lcc_set(&dv[ko + d], dva[c]); }
  }
}
`

// maxHeadDim bounds D: each lane keeps D/32 elements of a row per operand.
// Beyond 256 a lane's slices of the rows it keeps (q and acc; dk and dv in the
// backward) would spill out of registers.
const maxHeadDim = 256

// attnHeader renders attnCommon for node n (forward or grad).
func (g *gen) attnHeader(n *ir.Node) (string, error) {
	q, k := n.Args[0].Type, n.Args[1].Type
	b, t, hq, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	s, hkv := k.Shape[1], k.Shape[2]
	if d > maxHeadDim {
		return "", fmt.Errorf("head dim %d: the GPU kernels support D ≤ %d", d, maxHeadDim)
	}
	// Heads and batch ride on gridDim.y and .z, which CUDA caps at 65535; the query
	// tiles take gridDim.x, whose limit is far larger.
	if b > 65535 || hq > 65535 {
		return "", fmt.Errorf("batch %d or heads %d exceed the grid limit 65535", b, hq)
	}
	// One definition of the default 1/√D scale, shared with the CPU interpreter.
	scale := ir.AttentionScale(n)
	causal := b2i(n.AttrBool("causal"))
	dilated := 0
	brW, brR := []string{"1"}, []string{"1"}
	offBlock := 0
	if n.Op == ir.OpDilatedAttention || n.Op == ir.OpDilatedAttentionGrad {
		// LongNet's segments partition one sequence, so queries and keys must be the
		// same positions; cross-attention has no dilated form.
		if s != t {
			return "", fmt.Errorf("dilated attention needs as many keys as queries, got T=%d, S=%d", t, s)
		}
		dilated = 1
		// One branch per (segment, dilation) pair, as constant arrays in the kernel so
		// the branch loop costs no parameter loads.
		brW, brR = nil, nil
		seg, dil := n.AttrInts("segments"), n.AttrInts("dilations")
		for i := range seg {
			brW = append(brW, fmt.Sprint(seg[i]))
			brR = append(brR, fmt.Sprint(dil[i]))
		}
		if n.AttrString("offsets") == ir.OffsetsBlock {
			offBlock = 1
		}
	}
	hasMask, maskFloat, maskDocs := 0, 0, 0
	var ms [4]int64
	mt := "float"
	maskIdx := map[ir.Op]int{ir.OpAttention: 3, ir.OpAttentionGrad: 6}[n.Op] // dilated: no mask
	if ir.HasDocs(n) && maskIdx > 0 {
		// The doc starts sit where a mask would ([B, T], read as [B, 1, T, 1]), so the
		// kernels pass them as theirs.
		st := ir.DocStarts(n)
		hasMask, maskDocs = 1, 1
		ms = [4]int64{t, 0, 1, 0}
		mt = storageC[g.storageOf(st)]
	} else if maskIdx > 0 && len(n.Args) > maskIdx {
		m := n.Args[maskIdx]
		hasMask = 1
		maskFloat = b2i(m.Type.DType.IsFloat())
		// The mask is read in place with broadcast strides (0 on a size-1 dim), so a
		// [1, 1, T, S] causal mask is never expanded to [B, H, T, S].
		st := bcastStrides(m.Type.Shape, []int64{b, hq, t, s})
		copy(ms[:], st)
		mt = storageC[g.storageOf(m)]
	}
	qt := storageC[g.storageOf(n.Args[0])]
	hdr := fmt.Sprintf(attnCommon, b, t, s, hq, hkv, d, clit.Float(scale), causal, dilated, len(brW),
		offBlock, hasMask, maskFloat, ms[0], ms[1], ms[2], ms[3], qt, mt,
		strings.Join(brW, ", "), strings.Join(brR, ", "), maskDocs, ir.Window(n))
	// Without a mask the kernel passes a null pointer that mask_bias never reads,
	// so one template serves both signatures.
	if hasMask == 1 {
		hdr += "#define MASK_ARG mask\n"
	} else {
		hdr += "#define MASK_ARG ((const MT*)0)\n"
	}
	return fmt.Sprintf("// %s q %v k %v\n", n.Op, q, k) + hdr, nil
}

// b2i turns a flag into the 0 or 1 a #define in the kernel templates tests.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lowerAttention renders attention and dilated_attention forward.
func lowerAttention(g *gen, n *ir.Node) error {
	// Flash kernels when the shape, dtype and arch allow (attention_flash.go); the
	// warp-per-row kernels below serve everything else but packed documents.
	if d, err := g.chooseAttention(n); err == nil {
		return lowerFlash(g, n, d)
	}
	if err := refuseDilatedDocs(n); err != nil {
		return err
	}
	hdr, err := g.attnHeader(n)
	if err != nil {
		return err
	}
	q, k, v := n.Args[0], n.Args[1], n.Args[2]
	o, lse := n.Results[0], n.Results[1]
	params := []Param{g.param("o", o, true), g.param("lse", lse, true), g.param("q", q, false),
		g.param("k", k, false), g.param("v", v, false)}
	args := []int{g.ids[o], g.ids[lse], g.ids[q], g.ids[k], g.ids[v]}
	if len(n.Args) > 3 {
		params = append(params, g.param("mask", n.Args[3], false))
		args = append(args, g.ids[n.Args[3]])
	}
	t, hq, b := q.Type.Shape[1], q.Type.Shape[2], q.Type.Shape[0]
	// Four warps per block, one query row each: 128 threads, as attnForward assumes.
	grid := [3]uint32{uint32((t + 3) / 4), uint32(hq), uint32(b)}
	g.emit(kernelSpec{op: n.Op.String(), body: hdr + fmt.Sprintf(attnForward, signature(params)),
		grid: grid, block: [3]uint32{128, 1, 1}, params: params, args: args})
	return nil
}

// lowerAttentionGrad renders the backward as three kernels: delta, dq, and
// dk/dv, with delta in an f32 scratch buffer.
func lowerAttentionGrad(g *gen, n *ir.Node) error {
	if d, err := g.chooseAttention(n); err == nil {
		return lowerFlashGrad(g, n, d)
	}
	if err := refuseDilatedDocs(n); err != nil {
		return err
	}
	hdr, err := g.attnHeader(n)
	if err != nil {
		return err
	}
	q, k, v, o, lse, do := n.Args[0], n.Args[1], n.Args[2], n.Args[3], n.Args[4], n.Args[5]
	dq, dk, dv := n.Results[0], n.Results[1], n.Results[2]
	b, t, hq := q.Type.Shape[0], q.Type.Shape[1], q.Type.Shape[2]
	s, hkv := k.Type.Shape[1], k.Type.Shape[2]
	// delta is a temporary: both the dq and the dk/dv kernels read it, and
	// recomputing it in each would read dO and O twice more.
	delta := g.temp(tensor.F32, b, hq, t)
	deltaP := Param{Name: "delta", CType: "float"}
	var maskP []Param
	var maskA []int
	if len(n.Args) > 6 {
		maskP = []Param{g.param("mask", n.Args[6], false)}
		maskA = []int{g.ids[n.Args[6]]}
	}
	qGrid := [3]uint32{uint32((t + 3) / 4), uint32(hq), uint32(b)}
	block := [3]uint32{128, 1, 1}

	params := []Param{{Name: "delta", CType: "float", Out: true}, g.param("o", o, false), g.param("dout", do, false)}
	g.emit(kernelSpec{op: n.Op.String() + ".delta", body: hdr + fmt.Sprintf(attnDelta, signature(params)),
		grid: qGrid, block: block, params: params, args: []int{delta, g.ids[o], g.ids[do]}})

	params = append([]Param{g.param("dq", dq, true), g.param("q", q, false), g.param("k", k, false),
		g.param("v", v, false), g.param("lse", lse, false), g.param("dout", do, false), deltaP}, maskP...)
	args := append([]int{g.ids[dq], g.ids[q], g.ids[k], g.ids[v], g.ids[lse], g.ids[do], delta}, maskA...)
	g.emit(kernelSpec{op: n.Op.String() + ".dq", body: hdr + fmt.Sprintf(attnDQ, signature(params)),
		grid: qGrid, block: block, params: params, args: args})

	params = append([]Param{g.param("dk", dk, true), g.param("dv", dv, true), g.param("q", q, false),
		g.param("k", k, false), g.param("v", v, false), g.param("lse", lse, false),
		g.param("dout", do, false), deltaP}, maskP...)
	args = append([]int{g.ids[dk], g.ids[dv], g.ids[q], g.ids[k], g.ids[v], g.ids[lse], g.ids[do], delta}, maskA...)
	g.emit(kernelSpec{op: n.Op.String() + ".dkdv", body: hdr + fmt.Sprintf(attnDKDV, signature(params)),
		grid: [3]uint32{uint32((s + 3) / 4), uint32(hkv), uint32(b)}, block: block, params: params, args: args})
	return nil
}

// refuseDilatedDocs is the error of dilated attention over packed documents: its
// segments restart in each document, which neither kernel family models (dense
// attention's scalar kernels take the doc starts as a mask).
func refuseDilatedDocs(n *ir.Node) error {
	if ir.HasDocs(n) && (n.Op == ir.OpDilatedAttention || n.Op == ir.OpDilatedAttentionGrad) {
		return fmt.Errorf("%s: dilated attention over packed documents (--doc-sep) has no GPU kernel; "+
			"use --attention=dense, or train with --device=cpu", n.Where())
	}
	return nil
}
