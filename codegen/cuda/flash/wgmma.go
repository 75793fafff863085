package flash

import (
	"fmt"
	"strings"
)

// Tier 2 (sm_90a) device helpers: the shared-memory layout wgmma reads, its
// matrix descriptors, and the wgmma.mma_async wrappers.
//
// Layout. A tile of ROWS rows × FA_D bf16 is stored as FA_D/64 column blocks of
// ROWS rows × 64 elements (128 bytes a row); in each block the eight 16-byte
// chunks of a row are XOR-swizzled by the row's low three bits. That is wgmma's
// 128-byte swizzle, so a block's 8-row groups (1024 bytes) are its "core
// matrices" and every block starts 1024-byte aligned. A K-major operand (Q, K:
// rows are M or N, the head dim is the reduction) steps 16 elements of the
// reduction by adding 32 bytes to the descriptor's start address, within a
// block; an MN-major operand (V in P·V: rows are the reduction) steps 16 rows by
// 2048 bytes, and its descriptor's leading byte offset is the block size, the
// distance between the head dim's 64-element halves.
const common90Src = `
__device__ __forceinline__ int fa_swz90(int rows, int row, int col) {
  return (col >> 6) * rows * 64 + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}
// fa_load_tile90 queues rows [r0, r0+ROWS) of a row-strided bf16 matrix (rows
// >= n read as zeros, and so do the columns from FA_DG on: a head dim padded to
// FA_D) into a swizzled shared tile. NT is a multiple of 8·FA_D/8
// threads, so each thread keeps its 16-byte column and its rows' swizzle phase
// at every step: a tile with all its rows in range is a base address plus
// constants (no bounds check, no per-chunk 64-bit multiply).
template <int ROWS, int NT>
__device__ __forceinline__ void fa_load_tile90(fa_bf16* s, const fa_bf16* g, long long rs, long long r0, long long n, int tid) {
  const int CH = FA_D / 8, STEP = NT / CH;
  static_assert(STEP % 8 == 0, "fa_load_tile90: NT must be a multiple of 8 rows of chunks");
  const int rt = tid / CH, ch = tid % CH;
  const bool col = ch < FA_DG / 8;
  const unsigned sa = fa_smem(s + fa_swz90(ROWS, rt, ch * 8));
  if (r0 + ROWS <= n) {
    const fa_bf16* gt = g + (r0 + rt) * rs + ch * 8;
#pragma unroll
    for (int it = 0; it < (ROWS * CH + NT - 1) / NT; ++it) {
      if ((ROWS * CH) % NT != 0 && tid + it * NT >= ROWS * CH) break;
      fa_cp16(sa + it * STEP * 128, col ? gt + it * STEP * rs : g, col);
    }
    return;
  }
#pragma unroll
  for (int it = 0; it < (ROWS * CH + NT - 1) / NT; ++it) {
    if ((ROWS * CH) % NT != 0 && tid + it * NT >= ROWS * CH) break;
    const long long r = r0 + rt + it * STEP;
    const bool ok = r < n && col;
    fa_cp16(sa + it * STEP * 128, ok ? g + r * rs + ch * 8 : g, ok);
  }
}
// fa_tile_order maps the launch order (x fastest, then y) to a tile index bx
// along gridDim.x and a head hy along gridDim.y with the head varying fastest:
// CTAs start in about that order, so the tiles of one index run side by side
// across the heads. A causal kernel whose tiles' work falls or rises with the
// index then starts every head's longest tiles first, instead of leaving the
// last heads' longest ones for the kernel's tail.
__device__ __forceinline__ void fa_tile_order(int* bx, int* hy) {
  const unsigned lin = blockIdx.x + gridDim.x * blockIdx.y;
  *bx = (int)(lin / gridDim.y);
  *hy = (int)(lin % gridDim.y);
}
// fa_dadd steps a descriptor's start address by bytes (a multiple of 16 that
// keeps it inside shared memory, so the 14-bit field does not carry).
__device__ __forceinline__ unsigned long long fa_dadd(unsigned long long d, unsigned bytes) { return d + (bytes >> 4); }
// fa_desc is a wgmma shared-memory matrix descriptor with the 128-byte swizzle:
// start address, leading and stride byte offsets (all in 16-byte units).
__device__ __forceinline__ unsigned long long fa_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}
// fa_fence_async makes this thread's generic-proxy writes to shared memory
// (cp.async, st.shared) visible to wgmma, which reads through the async proxy.
__device__ __forceinline__ void fa_fence_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fa_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fa_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void fa_wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
`

// wgmmaFunc renders a wrapper for one wgmma.mma_async shape, bf16 inputs and
// fp32 accumulators d[n/2] (this thread's part of the 64×n tile): with ssA the
// A operand comes from a shared-memory descriptor, else from four registers of
// bf16 pairs (a 16×16 fragment of the warp's rows, as mma.sync's A). transA
// (shared A only) and transB read the operand MN-major. acc = 0 overwrites d,
// 1 adds to it.
func wgmmaFunc(name string, n int, ssA bool, transA, transB int) string {
	nd := n / 2
	var b strings.Builder
	fmt.Fprintf(&b, "__device__ __forceinline__ void %s(float* d, ", name)
	if ssA {
		b.WriteString("unsigned long long da, ")
	} else {
		b.WriteString("const unsigned* a, ")
	}
	b.WriteString("unsigned long long db, int acc) {\n  asm volatile(\"{\\n.reg .pred p;\\n")
	next := nd
	var aop string
	if ssA {
		aop = fmt.Sprintf("%%%d", next)
		next++
	} else {
		aop = fmt.Sprintf("{%%%d, %%%d, %%%d, %%%d}", next, next+1, next+2, next+3)
		next += 4
	}
	bop := next
	accop := next + 1
	fmt.Fprintf(&b, "setp.ne.b32 p, %%%d, 0;\\n\"\n    \"wgmma.mma_async.sync.aligned.m64n%dk16.f32.bf16.bf16 {", accop, n)
	for i := 0; i < nd; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%%%d", i)
	}
	fmt.Fprintf(&b, "}, %s, %%%d, p, 1, 1", aop, bop)
	if ssA {
		fmt.Fprintf(&b, ", %d", transA)
	}
	fmt.Fprintf(&b, ", %d;\\n}\\n\"\n    : ", transB)
	for i := 0; i < nd; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "\"+f\"(d[%d])", i)
	}
	b.WriteString("\n    : ")
	if ssA {
		b.WriteString("\"l\"(da)")
	} else {
		b.WriteString("\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])")
	}
	b.WriteString(", \"l\"(db), \"r\"(acc) : \"memory\");\n}\n")
	return b.String()
}
