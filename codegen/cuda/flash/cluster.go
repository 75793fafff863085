package flash

// Tier 2's cluster helpers (sm_90): a thread block cluster's launch order, its
// barrier, the shared-memory barriers (mbarrier) that order one CTA's writes
// into another's shared memory, and those writes.
//
// The fused backward runs its CTAs in pairs of adjacent key tiles (one
// cluster of two, __cluster_dims__): on the query tiles both walk, each CTA
// sends half of its dQ part's columns to the other through distributed shared
// memory and adds the other's half of the columns to its own before the
// fixed-point adds, so each dQ element of the item takes one integer atomic
// instead of two. The adds in L2 were a third of the backward
// (BENCHMARKS.md, session of 2026-12-02, 16:03 UTC), and they cost by their
// count, not their width.
//
// The exchange is a ring of two buffers in the receiver's shared memory, each
// with a "full" barrier in the receiver (the sender's threads arrive after
// their stores, with release at cluster scope) and an "empty" barrier in the
// sender (the receiver's threads arrive after their loads). Every thread
// sends and receives, so both counts are the CTA's 256 threads.
const cluster90Src = `
// fa_pair_order is fa_tile_order for a grid of clusters of two along x
// (gridDim.x even): the two CTAs of a cluster take key tiles 2p and 2p + 1 of
// the same head, and the pairs' heads vary fastest. *rank is the CTA's rank in
// its cluster (blockIdx.x mod 2).
__device__ __forceinline__ void fa_pair_order(int* bx, int* hy, int* rank) {
  const unsigned lin = blockIdx.x + gridDim.x * blockIdx.y, cl = lin >> 1;
  *rank = (int)(blockIdx.x & 1);
  *bx = (int)((cl / gridDim.y) * 2 + (lin & 1));
  *hy = (int)(cl % gridDim.y);
}
// fa_cluster_arrive and fa_cluster_wait are the two halves of the cluster's
// barrier: every thread of both CTAs arrives (release: its writes to either
// CTA's shared memory are done) before any passes the wait (acquire).
__device__ __forceinline__ void fa_cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fa_cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
// fa_mapa is the shared::cluster address of the same byte in CTA rank's
// shared memory as the shared::cta address a in this CTA's.
__device__ __forceinline__ unsigned fa_mapa(unsigned a, int rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
// fa_mbar_init makes the barrier at shared::cta address a expect count
// arrivals a phase; fa_mbar_fence makes the inits visible to the cluster.
__device__ __forceinline__ void fa_mbar_init(unsigned a, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void fa_mbar_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// fa_mbar_arrive_cl arrives on the barrier at shared::cluster address a (in
// either CTA), releasing this thread's earlier writes and reads at cluster
// scope.
__device__ __forceinline__ void fa_mbar_arrive_cl(unsigned a) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" :: "r"(a) : "memory");
}
// fa_mbar_wait_cl waits, acquiring at cluster scope, for the phase of parity
// par of the barrier at shared::cta address a to complete.
__device__ __forceinline__ void fa_mbar_wait_cl(unsigned a, unsigned par) {
  unsigned ok;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(ok) : "r"(a), "r"(par) : "memory");
  } while (!ok);
}
// fa_st_cl stores four floats at shared::cluster address a.
__device__ __forceinline__ void fa_st_cl(unsigned a, float x, float y, float z, float w) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "r"(a), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}
`
