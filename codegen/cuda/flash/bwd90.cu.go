package flash

// dkdvq90Src is tier 2's fused backward (sm_90a): tier 1's work split
// (dkdvqSrc: one CTA per key tile of FA_BC rows, kv head and batch × segment,
// walking the query tiles of FA_BR rows of each query head of the group; dK
// and dV in registers over the walk; dQ into the fixed-point sum) with every
// product on wgmma. Each of the two warpgroups owns 64 keys, so the products
// that reduce over the head dim come out transposed, keys × queries, and feed
// the next products from registers:
//
//	Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ      K, V, Q, dO from shared memory (K-major)
//	Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), dSᵀ = Pᵀ∘(dPᵀ − delta) in registers
//	dV += Pᵀ·dO, dK += dSᵀ·Q    A from registers, dO and Q read MN-major
//	dQ part = dS·K              dSᵀ through shared memory (A read MN-major), K
//	                            MN-major; warpgroup w takes half the head dim
//
// and dQ is added into tier 2's split-float fixed point (fa_red2f, two
// elements an atomic): the same bits in any order.
const dkdvq90Src = `extern "C" __global__ void __launch_bounds__(256, 1) @KERNEL@(FA_OT* __restrict__ dk, FA_OT* __restrict__ dv,
    const fa_bf16* __restrict__ q, const fa_bf16* __restrict__ k, const fa_bf16* __restrict__ v,
    const fa_bf16* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    unsigned* __restrict__ ws FA_DOCS_ARG) {
  extern __shared__ __align__(1024) unsigned char fa_sh[];
  fa_bf16* sK = (fa_bf16*)fa_sh;
  fa_bf16* sV = sK + FA_BC * FA_D;
  fa_bf16* sQ = sV + FA_BC * FA_D;
  fa_bf16* sO = sQ + FA_STAGES * FA_BR * FA_D;
  fa_bf16* sS = sO + FA_STAGES * FA_BR * FA_D;
  float* sL = (float*)(sS + 2 * FA_BC * FA_BR);  // sS: two buffers, by the item's parity
  float* sDl = sL + FA_STAGES * FA_BR;
  if (fa_smem(fa_sh) & 1023) __trap();  // the swizzle atoms need 1024-byte alignment
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const int g = lane >> 2, c2 = (lane & 3) * 2;
  // Heads vary fastest in the launch order (fa_tile_order): a causal key
  // tile's walk is the longer the nearer the tile is to the start, so the
  // longest walks of every head start in the first wave.
  int bx, hy;
  fa_tile_order(&bx, &hy);
#if FA_SPLIT
  // Split heads (Desc.SplitHeads): this CTA walks query head h0 alone.
  const int h0 = hy, hk = h0 / FA_G;
#define FA_GW 1
#else
  const int hk = hy, h0 = hk * FA_G;
#define FA_GW FA_G
#endif
  const long long b = blockIdx.z / FA_NSEG, sg = blockIdx.z % FA_NSEG, k0 = (long long)bx * FA_BC;
  long long kp0, kn, qp0, qn;  // a dilated branch (FA_G = 1): the rows of segment sg, head hk
  fa_geom(sg, h0, FA_S, &kp0, &kn);
  fa_geom(sg, h0, FA_T, &qp0, &qn);
  if (k0 >= kn) return;
  const long long* dsr = FA_DSR(b);
  long long first, qend, qk0;
  fa_queries(k0, kn, qn, dsr, &first, &qend, &qk0);
  const long long it0 = first / FA_BR;
  const long long qtiles = (qend + FA_BR - 1) / FA_BR;
  const int nit = qtiles > it0 ? (int)(qtiles - it0) : 0;
  const int nitems = FA_GW * nit;
  // Row strides (times the dilation): q's, k's and v's (Desc.Views), and ors of
  // dO and of the dQ sum, which are their own buffers.
  const long long qrs = FA_QRS * FA_R, krs = FA_KRS * FA_R, vrs = FA_VRS * FA_R;
  const long long ors = (long long)FA_HQ * FA_DG * FA_R;
  // The items: query tiles it0..qtiles − 1 of each head of the group. With one
  // head the walk goes forward from the diagonal. With a group it goes
  // query-major from the last tile down, so that the CTAs of a wave read the
  // same Q and dO tiles and add to the same dQ rows at about the same time, in
  // L2; walked head-major, the CTAs drift into different heads (their walks
  // differ in length) and the group's Q, dO and fixed-point dQ do not fit L2.
#if FA_GW > 1
#define fa_next(hh, ii) do { if (++(hh) == h0 + FA_GW) (hh) = h0, --(ii); } while (0)
  const long long ifirst = qtiles - 1;
#else
#define fa_next(hh, ii) (++(ii))
  const long long ifirst = it0;
#endif
  // loadq(h, i, st): query tile i of head h into stage st.
#define loadq(hh, ii, st) do { \
    const int h_ = (hh); \
    const long long qq_ = (ii) * FA_BR; \
    const long long qo_ = ((b * FA_T + qp0) * FA_HQ + h_) * FA_DG, lo_ = (b * FA_HQ + h_) * FA_LT + qp0; \
    const long long qv_ = FA_AT(Q, b, qp0, h_); \
    fa_load_tile90<FA_BR, 256>(sQ + (st) * FA_BR * FA_D, q + qv_, qrs, qq_, qn, tid); \
    fa_load_tile90<FA_BR, 256>(sO + (st) * FA_BR * FA_D, dout + qo_, ors, qq_, qn, tid); \
    if (tid < FA_BR) { \
      const bool ok_ = qq_ + tid < qn; \
      fa_cp4(fa_smem(sL + (st) * FA_BR + tid), lse + lo_ + (ok_ ? (qq_ + tid) * FA_R : 0), ok_); \
    } else if (tid < 2 * FA_BR) { \
      const int t_ = tid - FA_BR; \
      const bool ok_ = qq_ + t_ < qn; \
      fa_cp4(fa_smem(sDl + (st) * FA_BR + t_), delta + lo_ + (ok_ ? (qq_ + t_) * FA_R : 0), ok_); \
    } \
  } while (0)
  fa_load_tile90<FA_BC, 256>(sK, k + FA_AT(K, b, kp0, hk), krs, k0, kn, tid);
  fa_load_tile90<FA_BC, 256>(sV, v + FA_AT(V, b, kp0, hk), vrs, k0, kn, tid);
  int lh = h0;  // the next load's head and query tile
  long long li = ifirst;
#pragma unroll
  for (int s = 0; s < FA_STAGES - 1; ++s) {
    if (s < nitems) {
      loadq(lh, li, s);
      fa_next(lh, li);
    }
    fa_commit();
  }
  fa_wait<FA_STAGES - 2>();
  fa_fence_async();
  __syncthreads();
  const float dqmul = fa_dq_mul(ws + 2 * FA_NQ) * FA_SCALE;  // a power of two times the scale: the same bits
  unsigned long long* dqa = (unsigned long long*)ws;
  // This warpgroup's 64 keys in K's and V's column blocks; its half of the head
  // dim in K's blocks for dQ (MN-major: block (wg·D/2)/64, byte offset within).
  const unsigned ka = fa_smem(sK) + wg * 64 * 128, va = fa_smem(sV) + wg * 64 * 128;
  const unsigned kq = fa_smem(sK) + ((wg * (FA_D / 2)) >> 6) * FA_BC * 128 + ((wg * (FA_D / 2)) & 63) * 2;
  const unsigned sa = fa_smem(sS);
  // Descriptors are made once; the loop steps their start addresses (fa_dadd).
  const unsigned long long kd = fa_desc(ka, 16, 1024), vd = fa_desc(va, 16, 1024);
  const unsigned long long qd0 = fa_desc(fa_smem(sQ), 16, 1024), od0 = fa_desc(fa_smem(sO), 16, 1024);
  const unsigned long long qm0 = fa_desc(fa_smem(sQ), FA_BR * 128, 1024), om0 = fa_desc(fa_smem(sO), FA_BR * 128, 1024);
  const unsigned long long sd0 = fa_desc(sa, FA_BC * 128, 1024), kqd = fa_desc(kq, FA_BC * 128, 1024);
  const int kr = wg * 64 + (warp & 3) * 16 + g;  // this thread's key rows kr, kr + 8 of the tile
  float dva[FA_D / 2], dka[FA_D / 2];
#pragma unroll
  for (int i = 0; i < FA_D / 2; ++i) dva[i] = dka[i] = 0.0f;
  // dSᵀ's swizzled store address of this thread's rows kr, kr + 8 (one 128-byte
  // row of FA_BR = 64 queries each, the 16-byte chunk nt at nt XOR kr mod 8).
  const unsigned sw = fa_smem(sS) + (kr * 64 + c2) * 2, sx = (kr & 7) << 4;
  // reds adds this warpgroup's dQ part, dq, of the item whose first query row is
  // q00, head hh: each thread's two adjacent columns (the accumulators' own
  // layout) as one split-float v4 add (fa_red2f); a quad covers 64 bytes.
  float dq[FA_D / 4];
  const int qd = lane & 3;
  auto reds = [&](int hh, long long q00) {
    float* dg = (float*)(dqa + ((b * FA_T + qp0) * FA_HQ + hh) * FA_DG + wg * (FA_D / 2) + 2 * qd);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const long long row = q00 + (warp & 3) * 16 + g + r * 8;
      if (row >= qn) continue;
      float* p = dg + row * ors * 2;
#pragma unroll
      for (int nt = 0; nt < FA_D / 16; ++nt) {
        if (wg * (FA_D / 2) + nt * 8 >= FA_DG) break;  // a padded head dim's zero columns
        fa_red2f(p + nt * 16, dq[nt * 4 + 2 * r], dq[nt * 4 + 2 * r + 1], dqmul);
      }
    }
  };
  int h = h0, st = 0;  // this item's head and stage
  long long qi = ifirst;  // and query tile
  for (int w = 0; w < nitems; ++w) {
    const long long qq0 = qi * FA_BR;
    const unsigned so = st * FA_BR * FA_D * 2;  // the stage's byte offset in sQ and sO
    const float* cL = sL + st * FA_BR;
    const float* cD = sDl + st * FA_BR;
    float s[FA_BR / 2], dp[FA_BR / 2];
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < FA_D / 16; ++kk)
      fa_wg_st(s, fa_dadd(kd, (kk >> 2) * FA_BC * 128 + (kk & 3) * 32),
               fa_dadd(qd0, so + (kk >> 2) * FA_BR * 128 + (kk & 3) * 32), kk > 0);
    fa_wg_commit();
#pragma unroll
    for (int kk = 0; kk < FA_D / 16; ++kk)
      fa_wg_st(dp, fa_dadd(vd, (kk >> 2) * FA_BC * 128 + (kk & 3) * 32),
               fa_dadd(od0, so + (kk >> 2) * FA_BR * 128 + (kk & 3) * 32), kk > 0);
    fa_wg_commit();
    fa_wg_wait<1>();  // Sᵀ; dPᵀ runs on while P is computed
    const bool need = fa_item_masked(qq0, qn, k0, kn, qk0);
    unsigned pa[FA_BR / 16][4], da[FA_BR / 16][4];
    const unsigned swb = sw + (w & 1) * FA_BC * FA_BR * 2;
    if (need) {
#pragma unroll
      for (int nt = 0; nt < FA_BR / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int lq = nt * 8 + c2 + (e & 1), lk = kr + (e >> 1) * 8;
          const float L = cL[lq];
          float p = fa_exp2(fmaf(s[nt * 4 + e], FA_SL2, L == -FA_INF ? -FA_INF : -L * FA_LOG2E));
          const long long qrow = qq0 + lq, kcol = k0 + lk;
          if (FA_HIDDEN_AT(dsr, qrow, qn, kcol, kn)) p = 0.0f;
          s[nt * 4 + e] = p;
        }
    } else {
      // Every row of the tile sees all its keys, so its logsumexp is finite.
#pragma unroll
      for (int nt = 0; nt < FA_BR / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt * 4 + e] = fa_exp2(fmaf(s[nt * 4 + e], FA_SL2, -cL[nt * 8 + c2 + (e & 1)] * FA_LOG2E));
    }
    fa_wg_wait<0>();
#pragma unroll
    for (int nt = 0; nt < FA_BR / 8; ++nt) {
      float p[4], d[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[e] = s[nt * 4 + e];
        d[e] = p[e] * (dp[nt * 4 + e] - cD[nt * 8 + c2 + (e & 1)]);
      }
      pa[nt >> 1][(nt & 1) * 2] = fa_pack(p[0], p[1]);
      pa[nt >> 1][(nt & 1) * 2 + 1] = fa_pack(p[2], p[3]);
      da[nt >> 1][(nt & 1) * 2] = fa_pack(d[0], d[1]);
      da[nt >> 1][(nt & 1) * 2 + 1] = fa_pack(d[2], d[3]);
      // dSᵀ to shared memory for dQ: keys are rows, the FA_BR queries one
      // swizzled 128-byte row (FA_BR = 64); row kr + 8 is 1024 bytes on.
      const unsigned a = swb + ((nt << 4) ^ sx);
      asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(a), "r"(da[nt >> 1][(nt & 1) * 2]) : "memory");
      asm volatile("st.shared.b32 [%0+1024], %1;\n" :: "r"(a), "r"(da[nt >> 1][(nt & 1) * 2 + 1]) : "memory");
    }
    fa_fence_async();
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < FA_BR / 16; ++kk) fa_wg_dv(dva, pa[kk], fa_dadd(om0, so + kk * 2048), 1);
    fa_wg_commit();
    // The one barrier of the item: both warpgroups' dSᵀ are in shared memory,
    // and so are item w + 1's tiles. Item w + FA_STAGES − 1 then loads into
    // item w − 1's stage, which both warpgroups are done with; the other
    // buffer of sS lets one warpgroup write item w + 1's dSᵀ while the other
    // still reads item w's.
    fa_wait<FA_STAGES - 3>();
    fa_fence_async();
    __syncthreads();
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < FA_BC / 16; ++kk)
      fa_wg_dq(dq, fa_dadd(sd0, (w & 1) * FA_BC * FA_BR * 2 + kk * 2048), fa_dadd(kqd, kk * 2048), kk > 0);
    fa_wg_commit();
    // dK after dQ, so that dQ's fixed-point adds run under dK's product.
#pragma unroll
    for (int kk = 0; kk < FA_BR / 16; ++kk) fa_wg_dv(dka, da[kk], fa_dadd(qm0, so + kk * 2048), 1);
    fa_wg_commit();
    // The next loads are queued while dQ and dK run (they go to item w − 1's
    // stage, which neither reads).
    if (w + FA_STAGES - 1 < nitems) {
      const int ls = st == 0 ? FA_STAGES - 1 : st - 1;  // (w + FA_STAGES − 1) mod FA_STAGES
      loadq(lh, li, ls);
      fa_next(lh, li);
    }
    fa_commit();
    fa_wg_wait<1>();  // dV and dQ; dK runs on under the adds
    reds(h, qq0);
    // dK is waited for here, not at the next item's first wait: a product in
    // flight across the loop's back edge makes ptxas serialize every wgmma.
    fa_wg_wait<0>();
    fa_next(h, qi);
    if (++st == FA_STAGES) st = 0;
  }
  fa_wait<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = k0 + kr + r * 8;
    if (row >= kn) continue;
#if FA_SPLIT
    // This head's parts of dK and dV, [B, S, Hq, D] fp32 each, stored.
    const long long off = ((b * FA_S + kp0 + row * FA_R) * FA_HQ + h0) * FA_DG + c2;
#elif FA_ACC
    const long long off = ((b * FA_S + kp0 + row * FA_R) * FA_HKV + hk) * FA_DG + c2;
#else
    // dK and dV where they live (Desc.Views).
    const long long offk = FA_AT(DK, b, kp0 + row * FA_R, hk) + c2;
    const long long offv = FA_AT(DV, b, kp0 + row * FA_R, hk) + c2;
#endif
#pragma unroll
    for (int nt = 0; nt < FA_D / 8; ++nt) {
      if (nt * 8 >= FA_DG) break;  // a padded head dim's zero columns
#if FA_SPLIT
      *(float2*)(dk + off + nt * 8) = make_float2(dka[nt * 4 + 2 * r] * FA_SCALE, dka[nt * 4 + 2 * r + 1] * FA_SCALE);
      *(float2*)(dv + off + nt * 8) = make_float2(dva[nt * 4 + 2 * r], dva[nt * 4 + 2 * r + 1]);
#elif FA_ACC
      float2* pk = (float2*)(dk + off + nt * 8);
      float2* pv = (float2*)(dv + off + nt * 8);
      float2 x, y;
      if (FA_FIRST) {
        x.x = x.y = y.x = y.y = 0.0f;
      } else {
        x = *pk;
        y = *pv;
      }
      x.x += dka[nt * 4 + 2 * r] * FA_SCALE;
      x.y += dka[nt * 4 + 2 * r + 1] * FA_SCALE;
      y.x += dva[nt * 4 + 2 * r];
      y.y += dva[nt * 4 + 2 * r + 1];
      *pk = x;
      *pv = y;
#else
      *(unsigned*)(dk + offk + nt * 8) = fa_pack(dka[nt * 4 + 2 * r] * FA_SCALE, dka[nt * 4 + 2 * r + 1] * FA_SCALE);
      *(unsigned*)(dv + offv + nt * 8) = fa_pack(dva[nt * 4 + 2 * r], dva[nt * 4 + 2 * r + 1]);
#endif
    }
  }
}
#undef loadq
#undef fa_next
#undef FA_GW
`
