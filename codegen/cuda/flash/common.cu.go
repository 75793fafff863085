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
// FA_DSR(b) is batch row b's doc starts, what fa_start reads (null without
// documents).
#if FA_DOCS
#define FA_DSR(b) (ds + (b) * FA_T)
#else
#define FA_DSR(b) ((const long long*)0)
#endif
// The work of a CTA, which every kernel of the family shares.
//
// fa_keys gives the key tiles [*j0, *nkt) that a forward CTA's query tile
// (FA_BR rows from q0) sees: up to its last row's causal diagonal, from its first
// row's start (fa_start; starts never decrease).
__device__ __forceinline__ void fa_keys(long long q0, long long kn, const long long* dsr, int* j0, int* nkt) {
  long long kend = kn;
  if (FA_CAUSAL) {
    const long long lim = FA_QPOS + q0 + FA_BR - FA_KPOS;
    if (lim < kend) kend = lim;
  }
  *nkt = kend > 0 ? (int)((kend + FA_BC - 1) / FA_BC) : 0;
  *j0 = 0;
#if FA_LEFT
  *j0 = (int)(fa_start(dsr, q0) / FA_BC);
#endif
}
// fa_queries gives the query rows that see a backward CTA's key tile (FA_BC
// keys from k0): from *first, its causal diagonal, to *qend, the first query
// whose start (fa_start) lies past the tile's last key; the rows from *qk0 on,
// whose starts lie past k0, miss some of its keys and need the mask.
__device__ __forceinline__ void fa_queries(long long k0, long long kn, long long qn, const long long* dsr,
    long long* first, long long* qend, long long* qk0) {
  long long f = 0;
  if (FA_CAUSAL) {
    f = FA_KPOS + k0 - FA_QPOS;
    if (f < 0) f = 0;
  }
  *first = f;
  *qend = qn;
  *qk0 = qn;
#if FA_LEFT
  *qend = fa_doc_end(dsr, f, qn, (k0 + FA_BC < kn ? k0 + FA_BC : kn) - 1);
  *qk0 = fa_doc_end(dsr, f, *qend, k0);
#endif
}
// fa_hidden says whether key col is hidden from query row, whose first visible
// key is st (fa_start's, read only with FA_LEFT): past the keys, after the
// causal diagonal, or before the start.
__device__ __forceinline__ bool fa_hidden(long long row, long long col, long long kn, long long st) {
  return col >= kn || (FA_CAUSAL && FA_KPOS + col > FA_QPOS + row) || (FA_LEFT && col < st);
}
// FA_HIDDEN_AT is fa_hidden for a row past the queries too (qn), reading the
// row's start only when the other tests pass. A macro: as a function, ptxas
// spills the tier-2 backward at head dim 96 with documents (TestNoSpills).
#define FA_HIDDEN_AT(dsr, row, qn, col, kn) \
  ((row) >= (qn) || (col) >= (kn) || (FA_CAUSAL && FA_KPOS + (col) > FA_QPOS + (row)) || \
   (FA_LEFT && (col) < fa_start((dsr), (row))))
// fa_keys_masked says whether the forward's key tile from k0 needs the mask for
// a warp's rows from r (whose largest start is smax): a ragged last tile, the
// causal diagonal, or a start inside it.
__device__ __forceinline__ bool fa_keys_masked(long long k0, long long kn, long long r, long long smax) {
  return k0 + FA_BC > kn || (FA_CAUSAL && FA_KPOS + k0 + FA_BC - 1 > FA_QPOS + r) || (FA_LEFT && k0 < smax);
}
// fa_item_masked says whether the backward's item (FA_BR queries from qq0
// against the CTA's FA_BC keys from k0) needs the mask: ragged rows or keys, the
// causal diagonal, or queries from qk0 on (fa_queries).
__device__ __forceinline__ bool fa_item_masked(long long qq0, long long qn, long long k0, long long kn, long long qk0) {
  return qq0 + FA_BR > qn || k0 + FA_BC > kn || (FA_CAUSAL && FA_QPOS + qq0 < FA_KPOS + k0 + FA_BC - 1) ||
         (FA_LEFT && qq0 + FA_BR > qk0);
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
