package cuda

import (
	"fmt"
	"strings"
)

// The fused multi-tensor optimizer kernels of a training step whose state stays
// on the device (runtime/exec.Optimizer): gradient accumulation, the global
// gradient norm and its clipping coefficient, the AdamW update and the rounding
// of fp32 master weights into the working copy. Every kernel walks a table of
// chunks: chunk c is OptimChunk elements (or fewer, at a tensor's end) of tensor
// ck[c] starting at element cs[c]; tensor k's gradient and working weight are at
// gptr[k] and wptr[k] in their storage dtypes, and its fp32 master, moments and
// gradient sum are at base[k] in flat fp32 buffers. One block runs one chunk, so
// a launch covers every trained weight at once.
//
// The arithmetic is train/optim's AdamW update, operation for operation, with
// rounding intrinsics so NVRTC contracts nothing into an FMA; the norm sums
// squares in fp64 in a fixed order (deterministic). The host computes the step's
// scalars in fp64, rounded to fp32 as the IR update casts them.

// OptimScalars is the number of fp32 step scalars the AdamW kernel reads.
const OptimScalars = 7

// OptimChunk is the number of elements one block of an optimizer kernel handles.
const OptimChunk = 8192

// OptimBlock is the block size of the chunked optimizer kernels.
const OptimBlock = 256

// Entry points of the optimizer kernels; the dtype suffixes say the gradient's
// and the working weight's storage ("f32" or "bf16").
const (
	// OptimSumSqEntry: partial[c] = Σ (g/micro)² over chunk c, in fp64.
	OptimSumSqEntry = "lcc_optim_sumsq"
	// OptimNormEntry (one block): out[0] = sqrt(Σ partial), out[1] = the
	// clipping coefficient min(max_norm/(norm+1e-6), 1) (1 without clipping).
	OptimNormEntry = "lcc_optim_norm"
	// OptimAdamWEntry: the AdamW update of master, m and v, and the working copy.
	// Its step scalars are OptimScalars fp32 values in device memory: decay,
	// 1−β1, β2, 1−β2, √(bias correction 2), ε and the step size.
	OptimAdamWEntry = "lcc_optim_adamw"
	// OptimAccumEntry: sum = g (first micro-step) or sum + g.
	OptimAccumEntry = "lcc_optim_accum"
	// OptimCastEntry: working copy = master rounded to the weight's storage.
	OptimCastEntry = "lcc_optim_cast"
)

const optimSource = `
#define CHUNK @CHUNK@
// The chunk this block handles: tensor k, elements [s, s+n) of it.
#define OPTIM_CHUNK() \
  const int k = ck[blockIdx.x]; const long long s = cs[blockIdx.x]; const int n = cl[blockIdx.x]

// optim_ld4 and optim_st4 move four consecutive elements in one access (16
// bytes of fp32, 8 of bf16); the callers check the alignment.
__device__ __forceinline__ void optim_ld4(const float* p, float* x) {
  const float4 v = *(const float4*)p;
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void optim_ld4(const lcc_bf16* p, float* x) {
  const uint2 v = *(const uint2*)p;
  x[0] = __uint_as_float(v.x << 16), x[1] = __uint_as_float(v.x & 0xffff0000u);
  x[2] = __uint_as_float(v.y << 16), x[3] = __uint_as_float(v.y & 0xffff0000u);
}
__device__ __forceinline__ void optim_st4(float* p, const float* x) { *(float4*)p = make_float4(x[0], x[1], x[2], x[3]); }
__device__ __forceinline__ void optim_st4(lcc_bf16* p, const float* x) {
  uint2 v;
  v.x = (unsigned)lcc_bf16_of(x[0]).x | ((unsigned)lcc_bf16_of(x[1]).x << 16);
  v.y = (unsigned)lcc_bf16_of(x[2]).x | ((unsigned)lcc_bf16_of(x[3]).x << 16);
  *(uint2*)p = v;
}
// optim_adamw1 is AdamW's update of one element: gradient gr (scaled and
// clipped), master p, moments m and v, in place.
__device__ __forceinline__ void optim_adamw1(float gr, float& p, float& m, float& v, float decay,
    float one_minus_beta1, float beta2, float one_minus_beta2, float bc2_sqrt, float eps, float step_size) {
  p = __fmul_rn(p, decay);
  m = __fadd_rn(m, __fmul_rn(__fsub_rn(gr, m), one_minus_beta1));
  v = __fadd_rn(__fmul_rn(v, beta2), __fmul_rn(__fmul_rn(gr, gr), one_minus_beta2));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), eps);
  p = __fadd_rn(p, __fmul_rn(__fdiv_rn(m, denom), step_size));
}
// optim_aligned4 says whether p may be read four elements at a time.
template <class T> __device__ __forceinline__ bool optim_aligned4(const T* p) {
  return ((unsigned long long)p & (4 * sizeof(T) - 1)) == 0;
}

// The sum of squares reads four gradients an access where they are aligned
// (the chunk's start and length: every chunk but a tensor's ragged last one),
// into four fp64 sums a thread, then lcc_block_sum: deterministic, and the
// same order in every run. Without micro-steps (micro = 1) the division is left
// out: x/1 is x in IEEE arithmetic, so the bits are the same.
extern "C" __global__ void @SUMSQ@(const unsigned long long* gptr, const int* ck,
    const long long* cs, const int* cl, double* partial, float micro) {
  __shared__ double sh[32];
  OPTIM_CHUNK();
  const @GT@* g = (const @GT@*)gptr[k] + s;
  const bool whole = micro == 1.0f;
  double acc = 0.0;
  if ((n & 3) == 0 && optim_aligned4(g)) {
    double a4[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll 4
    for (int j = 4 * threadIdx.x; j < n; j += 4 * blockDim.x) {
      float x[4];
      optim_ld4(g + j, x);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float y = whole ? x[e] : __fdiv_rn(x[e], micro);
        a4[e] += (double)__fmul_rn(y, y);
      }
    }
    acc = (a4[0] + a4[1]) + (a4[2] + a4[3]);
  } else {
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const float x = whole ? lcc_tof(g[j]) : __fdiv_rn(lcc_tof(g[j]), micro);
      acc += (double)__fmul_rn(x, x);
    }
  }
  acc = lcc_block_sum(acc, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

extern "C" __global__ void @NORM@(const double* partial, int n, double max_norm, double* out) {
  __shared__ double sh[32];
  // Each thread sums a strided share into four sums, each in order (four loads
  // in flight: a billion-parameter model has 10^5 partials), then the four in
  // a fixed order and lcc_block_sum: deterministic.
  const int bd = blockDim.x;
  double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
  int j = threadIdx.x;
  for (; j + 3 * bd < n; j += 4 * bd) {
    a0 += partial[j];
    a1 += partial[j + bd];
    a2 += partial[j + 2 * bd];
    a3 += partial[j + 3 * bd];
  }
  if (j < n) a0 += partial[j];
  if (j + bd < n) a1 += partial[j + bd];
  if (j + 2 * bd < n) a2 += partial[j + 2 * bd];
  const double acc = lcc_block_sum((a0 + a1) + (a2 + a3), sh);
  if (threadIdx.x == 0) {
    const double norm = sqrt(acc);
    double coef = 1.0;
    if (max_norm > 0.0) {
      coef = max_norm / (norm + 1e-6);
      if (coef > 1.0) coef = 1.0;
    }
    out[0] = norm;
    out[1] = coef;
  }
}

extern "C" __global__ void @ADAMW@(const unsigned long long* gptr, const unsigned long long* wptr,
    const long long* base, const int* ck, const long long* cs, const int* cl,
    float* master, float* m, float* v, const double* normcoef, float micro, int clip,
    const float* sc) {
  OPTIM_CHUNK();
  // The step's scalars (OptimScalars) come from device memory, written before
  // each launch, so that a captured CUDA graph replays the update at a new rate.
  const float decay = sc[0], one_minus_beta1 = sc[1], beta2 = sc[2], one_minus_beta2 = sc[3];
  const float bc2_sqrt = sc[4], eps = sc[5], step_size = sc[6];
  const @GT@* g = (const @GT@*)gptr[k] + s;
  @WT@* w = (@WT@*)wptr[k] + s;
  const long long o = base[k] + s;
  const float coef = (float)normcoef[1];
  // Four elements an access where every operand is aligned (each element's
  // arithmetic is the same either way, so the bits are too).
  // The state's pointers are tested, not o: the streamed update's windows
  // shift them (runtime/exec's host_stream.go).
  const int vec = (n & 3) == 0 && optim_aligned4(g) && optim_aligned4(w) && optim_aligned4(master + o) &&
                  optim_aligned4(m + o) && optim_aligned4(v + o) ? n : 0;
  for (int j = 4 * threadIdx.x; j < vec; j += 4 * blockDim.x) {
    float gr[4], p[4], mo[4], vo[4];
    optim_ld4(g + j, gr);
    optim_ld4(master + o + j, p);
    optim_ld4(m + o + j, mo);
    optim_ld4(v + o + j, vo);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float gs = __fdiv_rn(gr[e], micro);
      if (clip) gs = __fmul_rn(gs, coef);
      optim_adamw1(gs, p[e], mo[e], vo[e], decay, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, step_size);
    }
    optim_st4(master + o + j, p);
    optim_st4(m + o + j, mo);
    optim_st4(v + o + j, vo);
    optim_st4(w + j, p);
  }
  for (int j = vec + threadIdx.x; j < n; j += blockDim.x) {
    float gr = __fdiv_rn(lcc_tof(g[j]), micro);
    if (clip) gr = __fmul_rn(gr, coef);
    float p = master[o + j], mo = m[o + j], vo = v[o + j];
    optim_adamw1(gr, p, mo, vo, decay, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, step_size);
    master[o + j] = p;
    m[o + j] = mo;
    v[o + j] = vo;
    lcc_set(&w[j], p);
  }
}

extern "C" __global__ void @ACCUM@(const unsigned long long* gptr, const long long* base,
    const int* ck, const long long* cs, const int* cl, float* sum, int first) {
  OPTIM_CHUNK();
  const @GT@* g = (const @GT@*)gptr[k] + s;
  float* d = sum + base[k] + s;
  for (int j = threadIdx.x; j < n; j += blockDim.x)
    d[j] = first ? lcc_tof(g[j]) : __fadd_rn(d[j], lcc_tof(g[j]));
}

extern "C" __global__ void @CAST@(const unsigned long long* wptr, const long long* base,
    const int* ck, const long long* cs, const int* cl, const float* master) {
  OPTIM_CHUNK();
  @WT@* w = (@WT@*)wptr[k] + s;
  const float* p = master + base[k] + s;
  for (int j = threadIdx.x; j < n; j += blockDim.x) lcc_set(&w[j], p[j]);
}
`

// optimC is the C type of an optimizer operand's storage dtype.
var optimC = map[string]string{"f32": "float", "bf16": "lcc_bf16"}

// OptimKernel returns the optimizer kernels for gradients stored as grad and
// working weights stored as weight ("f32" or "bf16"): one source whose entry
// points are the Optim*Entry names suffixed "_<grad>_<weight>" (Kernel.Entry is
// the AdamW update's; OptimEntry names the others).
func OptimKernel(grad, weight string) (Kernel, error) {
	gt, ok1 := optimC[grad]
	wt, ok2 := optimC[weight]
	if !ok1 || !ok2 {
		return Kernel{}, fmt.Errorf("optimizer kernels: gradient %q, weight %q: want f32 or bf16 storage",
			grad, weight)
	}
	r := strings.NewReplacer("@CHUNK@", fmt.Sprint(OptimChunk), "@BLOCK@", fmt.Sprint(OptimBlock),
		"@GT@", gt, "@WT@", wt,
		"@SUMSQ@", OptimEntry(OptimSumSqEntry, grad, weight), "@NORM@", OptimEntry(OptimNormEntry, grad, weight),
		"@ADAMW@", OptimEntry(OptimAdamWEntry, grad, weight), "@ACCUM@", OptimEntry(OptimAccumEntry, grad, weight),
		"@CAST@", OptimEntry(OptimCastEntry, grad, weight))
	name := OptimEntry("lcc_optim", grad, weight)
	return Kernel{Name: name, Op: "optim.adamw", Source: prelude + r.Replace(optimSource),
		Entry: OptimEntry(OptimAdamWEntry, grad, weight), Grid: [3]uint32{1, 1, 1},
		Block: [3]uint32{OptimBlock, 1, 1}}, nil
}

// OptimEntry is the entry point of optimizer kernel entry for grad and weight
// storage.
func OptimEntry(entry, grad, weight string) string { return entry + "_" + grad + "_" + weight }

// OptimChunks splits tensors of the given element counts into the chunk table of
// the optimizer kernels: per chunk its tensor, first element and length.
func OptimChunks(sizes []int64) (ck []int32, cs []int64, cl []int32) {
	for k, n := range sizes {
		for s := int64(0); s < n; s += OptimChunk {
			ck = append(ck, int32(k))
			cs = append(cs, s)
			cl = append(cl, int32(min(OptimChunk, n-s)))
		}
	}
	return ck, cs, cl
}
