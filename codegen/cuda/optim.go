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
// squares in fp64 in a fixed tree (deterministic). The host computes the step's
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

extern "C" __global__ void @SUMSQ@(const unsigned long long* gptr, const int* ck,
    const long long* cs, const int* cl, double* partial, float micro) {
  __shared__ double sh[@BLOCK@];
  OPTIM_CHUNK();
  const @GT@* g = (const @GT@*)gptr[k] + s;
  double acc = 0.0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float x = __fdiv_rn(lcc_tof(g[j]), micro);
    acc += (double)__fmul_rn(x, x);
  }
  acc = lcc_block_reduce(acc, sh, lcc_op_add());
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

extern "C" __global__ void @NORM@(const double* partial, int n, double max_norm, double* out) {
  __shared__ double sh[@BLOCK@];
  // Each thread sums a strided share in order, then a fixed tree: deterministic.
  double acc = 0.0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) acc += partial[j];
  acc = lcc_block_reduce(acc, sh, lcc_op_add());
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
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    float gr = __fdiv_rn(lcc_tof(g[j]), micro);
    if (clip) gr = __fmul_rn(gr, coef);
    const float mo = m[o + j], vo = v[o + j];
    float p = __fmul_rn(master[o + j], decay);
    const float mn = __fadd_rn(mo, __fmul_rn(__fsub_rn(gr, mo), one_minus_beta1));
    const float vn = __fadd_rn(__fmul_rn(vo, beta2), __fmul_rn(__fmul_rn(gr, gr), one_minus_beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vn), bc2_sqrt), eps);
    p = __fadd_rn(p, __fmul_rn(__fdiv_rn(mn, denom), step_size));
    master[o + j] = p;
    m[o + j] = mn;
    v[o + j] = vn;
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
