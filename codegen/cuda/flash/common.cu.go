package flash

import "github.com/lcc-dev/lcc/ir"

// commonSrc is the device code every kernel of the family shares: bf16 helpers,
// PTX wrappers (cp.async, ldmatrix, mma.sync m16n8k16 bf16 → fp32), the swizzled
// shared-memory layout, and the row geometry of a (possibly dilated) head.
const commonSrc = ir.HeadOffsetCUDA + `typedef unsigned short fa_bf16;
#define FA_INF __int_as_float(0x7f800000)
#define FA_LOG2E 1.4426950408889634f
__device__ __forceinline__ float fa_tof(fa_bf16 v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ unsigned fa_smem(const void* p) {
  unsigned r;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}
// fa_cp16 copies 16 bytes global -> shared asynchronously; !ok fills zeros.
__device__ __forceinline__ void fa_cp16(unsigned dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void fa_cp4(unsigned dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(dst), "l"(src), "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void fa_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }
__device__ __forceinline__ void fa_ldm4(unsigned* r, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void fa_ldm4t(unsigned* r, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
// fa_mma: c += a·b on one m16n8k16 tile, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void fa_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// fa_pack rounds two floats to bf16 (nearest even): lo in the low half.
__device__ __forceinline__ unsigned fa_pack(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float fa_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// fa_swz is the element offset of (row, col) in a tile of rows × FA_D bf16: the
// 16-byte chunks of a row are XOR-swizzled by the row's low three bits, so the
// eight rows one ldmatrix phase reads fall in eight different bank groups.
__device__ __forceinline__ int fa_swz(int row, int col) {
  return row * FA_D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}
// fa_off is the LongNet row offset o(h) of head h in a branch of dilation FA_R.
__device__ __forceinline__ int fa_off(int h) {
  if (FA_R == 1) return 0;
  return lcc_head_offset(h, FA_HQ, FA_R, FA_OFFBLOCK);
}
// fa_geom gives the rows segment sg of head h sees in a sequence of len rows:
// positions p0 + i·FA_R for i < n.
__device__ __forceinline__ void fa_geom(long long sg, int h, long long len, long long* p0, long long* n) {
  const long long st = sg * FA_W;
  long long sl = len - st;
  if (sl > FA_W) sl = FA_W;
  const int o = fa_off(h);
  *p0 = st + o;
  *n = sl > o ? (sl - o + FA_R - 1) / FA_R : 0;
}
// With FA_DOCS the kernels take the doc starts of packed documents as their last
// argument (ir/docs.go): ds [B, T] int64, query t's first visible key. Starts are
// non-decreasing along a row, which is what lets a key tile find the last query
// tile that still sees it by bisection (fa_doc_end) instead of a scan.
#if FA_DOCS
#define FA_DOCS_ARG , const long long* __restrict__ ds
#else
#define FA_DOCS_ARG
#endif
// FA_LEFT: a query's first visible key need not be 0, because of documents, a
// sliding window of FA_WIN keys (ir/window.go), or both.
#define FA_LEFT (FA_DOCS || FA_WIN > 0)
// fa_start is query t's first visible key: its document's start (ds, this
// batch row's starts, read only with FA_DOCS), or t − FA_WIN + 1, whichever is
// later. It never decreases with t.
__device__ __forceinline__ long long fa_start(const long long* ds, long long t) {
  long long s = 0;
#if FA_DOCS
  s = ds[t];
#endif
#if FA_WIN > 0
  if (t - FA_WIN + 1 > s) s = t - FA_WIN + 1;
#endif
  return s;
}
// fa_doc_end is the first t in [lo, hi) with fa_start(ds, t) > key (hi when
// there is none).
__device__ __forceinline__ long long fa_doc_end(const long long* ds, long long lo, long long hi, long long key) {
  while (lo < hi) {
    const long long mid = (lo + hi) >> 1;
    if (fa_start(ds, mid) > key) hi = mid; else lo = mid + 1;
  }
  return lo;
}
// fa_load_tile queues rows [r0, r0+ROWS) of a row-strided bf16 matrix (rows >= n
// read as zeros, and so do the columns from FA_DG on: a head dim padded to FA_D)
// into a swizzled shared tile.
template <int ROWS, int NT>
__device__ __forceinline__ void fa_load_tile(fa_bf16* s, const fa_bf16* g, long long rs, long long r0, long long n, int tid) {
  const int CH = FA_D / 8;
#pragma unroll
  for (int it = 0; it < (ROWS * CH + NT - 1) / NT; ++it) {
    const int c = tid + it * NT;
    if (c >= ROWS * CH) break;
    const int r = c / CH, ch = c % CH;
    const bool ok = r0 + r < n && ch < FA_DG / 8;  // a padded head dim's columns read as zeros
    const fa_bf16* src = ok ? g + (r0 + r) * rs + ch * 8 : g;
    fa_cp16(fa_smem(s + fa_swz(r, ch * 8)), src, ok);
  }
}
`
