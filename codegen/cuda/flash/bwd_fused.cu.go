package flash

// dkdvqSrc is the fused backward (DQFused), laid out as FlashAttention-2's: one
// CTA of eight warps per (key tile of FA_BC rows, kv head, batch) keeps K and V
// in shared memory and walks the query tiles of FA_BR rows that see its keys
// (for each query head of the group), streaming Q, dO, lse and delta through
// FA_STAGES buffers. Per tile, with the warps in a different grid for each
// product so that every warp's operands stay small:
//
//	S = Q·Kᵀ, dP = dO·Vᵀ    warps 2 (queries) × 4 (keys)
//	P = exp2(S·scale·log2e − lse·log2e), dS = P∘(dP − delta), both to shared memory as bf16
//	dV += Pᵀ·dO, dK += dSᵀ·Q warps 4 (keys) × 2 (head dim), in registers over the walk
//	dQ part = dS·K          warps 2 (queries) × 4 (head dim), added with fa_red64
//
// The dK and dV of a key are summed by one thread in a fixed order; dQ is a
// 64-bit fixed-point sum of integer atomics, the same bits in any order.
const dkdvqSrc = `#define FA_PS (FA_BC + 8)
#define FA_MT (FA_BR / 32)
#define FA_NS (FA_BC / 32)
#define FA_KM (FA_BC / 64)
#define FA_DN (FA_D / 16)
#define FA_QN (FA_D / 32)
extern "C" __global__ void __launch_bounds__(256, 1) @KERNEL@(FA_OT* __restrict__ dk, FA_OT* __restrict__ dv,
    const fa_bf16* __restrict__ q, const fa_bf16* __restrict__ k, const fa_bf16* __restrict__ v,
    const fa_bf16* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    unsigned* __restrict__ ws FA_DOCS_ARG) {
  extern __shared__ __align__(128) unsigned char fa_sh[];
  fa_bf16* sK = (fa_bf16*)fa_sh;
  fa_bf16* sV = sK + FA_BC * FA_D;
  fa_bf16* sQ = sV + FA_BC * FA_D;
  fa_bf16* sO = sQ + FA_STAGES * FA_BR * FA_D;
  fa_bf16* sP = sO + FA_STAGES * FA_BR * FA_D;
  fa_bf16* sS = sP + FA_BR * FA_PS;
  float* sL = (float*)(sS + FA_BR * FA_PS);
  float* sDl = sL + FA_STAGES * FA_BR;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, c2 = (lane & 3) * 2;
#if FA_SPLIT
  // Split heads (Desc.SplitHeads): this CTA walks query head h0 alone.
  const int h0 = blockIdx.y, hk = h0 / FA_G;
#define FA_GW 1
#else
  const int hk = blockIdx.y, h0 = hk * FA_G;
#define FA_GW FA_G
#endif
  const long long b = blockIdx.z / FA_NSEG, sg = blockIdx.z % FA_NSEG, k0 = (long long)blockIdx.x * FA_BC;
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
  // loadq queues work item w (query head h0 + w / nit, query tile it0 + w % nit)
  // into stage st.
#define loadq(w, st) do { \
    const int h_ = h0 + (w) / nit; \
    const long long qq_ = (it0 + (w) % nit) * FA_BR; \
    const long long qo_ = ((b * FA_T + qp0) * FA_HQ + h_) * FA_DG, lo_ = (b * FA_HQ + h_) * FA_LT + qp0; \
    const long long qv_ = FA_AT(Q, b, qp0, h_); \
    fa_load_tile<FA_BR, 256>(sQ + (st) * FA_BR * FA_D, q + qv_, qrs, qq_, qn, tid); \
    fa_load_tile<FA_BR, 256>(sO + (st) * FA_BR * FA_D, dout + qo_, ors, qq_, qn, tid); \
    if (tid < FA_BR) { \
      const bool ok_ = qq_ + tid < qn; \
      fa_cp4(fa_smem(sL + (st) * FA_BR + tid), lse + lo_ + (ok_ ? (qq_ + tid) * FA_R : 0), ok_); \
    } else if (tid < 2 * FA_BR) { \
      const int t_ = tid - FA_BR; \
      const bool ok_ = qq_ + t_ < qn; \
      fa_cp4(fa_smem(sDl + (st) * FA_BR + t_), delta + lo_ + (ok_ ? (qq_ + t_) * FA_R : 0), ok_); \
    } \
  } while (0)
  fa_load_tile<FA_BC, 256>(sK, k + FA_AT(K, b, kp0, hk), krs, k0, kn, tid);
  fa_load_tile<FA_BC, 256>(sV, v + FA_AT(V, b, kp0, hk), vrs, k0, kn, tid);
#pragma unroll
  for (int s = 0; s < FA_STAGES - 1; ++s) {
    if (s < nitems) loadq(s, s);
    fa_commit();
  }
  const float dqmul = fa_dq_mul(ws + 2 * FA_NQ);
  unsigned long long* dqa = (unsigned long long*)ws;
  const int wm = warp & 1, wn = warp >> 1;  // S, dP: query half, key quarter
  const int wk = warp & 3, wd = warp >> 2;  // dK, dV: key quarter, head-dim half
  const int wc = warp >> 1;                 // dQ: query half wm, head-dim quarter wc
  float dva[FA_KM][FA_DN][4], dka[FA_KM][FA_DN][4];
#pragma unroll
  for (int mi = 0; mi < FA_KM; ++mi)
#pragma unroll
    for (int i = 0; i < FA_DN; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) dva[mi][i][e] = dka[mi][i][e] = 0.0f;
  for (int w = 0; w < nitems; ++w) {
    fa_wait<FA_STAGES - 2>();
    __syncthreads();
    if (w + FA_STAGES - 1 < nitems) loadq(w + FA_STAGES - 1, (w + FA_STAGES - 1) % FA_STAGES);
    fa_commit();
    const int st = w % FA_STAGES, h = h0 + w / nit;
    const long long qq0 = (it0 + w % nit) * FA_BR;
    const fa_bf16* cQ = sQ + st * FA_BR * FA_D;
    const fa_bf16* cO = sO + st * FA_BR * FA_D;
    const float* cL = sL + st * FA_BR;
    const float* cD = sDl + st * FA_BR;
    float s[FA_MT][FA_NS][4], dp[FA_MT][FA_NS][4];
#pragma unroll
    for (int mi = 0; mi < FA_MT; ++mi)
#pragma unroll
      for (int i = 0; i < FA_NS; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][i][e] = dp[mi][i][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < FA_D / 16; ++kk) {
      unsigned a[FA_MT][4], c[FA_MT][4];
#pragma unroll
      for (int mi = 0; mi < FA_MT; ++mi) {
        const int r = wm * (FA_BR / 2) + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, col = kk * 16 + (lane >> 4) * 8;
        fa_ldm4(a[mi], fa_smem(cQ + fa_swz(r, col)));
        fa_ldm4(c[mi], fa_smem(cO + fa_swz(r, col)));
      }
#pragma unroll
      for (int np = 0; np < FA_NS / 2; ++np) {
        const int r = wn * (FA_BC / 4) + np * 16 + (lane & 7) + ((lane >> 4) << 3), col = kk * 16 + ((lane >> 3) & 1) * 8;
        unsigned bb[4];
        fa_ldm4(bb, fa_smem(sK + fa_swz(r, col)));
#pragma unroll
        for (int mi = 0; mi < FA_MT; ++mi) {
          fa_mma(s[mi][2 * np], a[mi], bb[0], bb[1]);
          fa_mma(s[mi][2 * np + 1], a[mi], bb[2], bb[3]);
        }
        fa_ldm4(bb, fa_smem(sV + fa_swz(r, col)));
#pragma unroll
        for (int mi = 0; mi < FA_MT; ++mi) {
          fa_mma(dp[mi][2 * np], c[mi], bb[0], bb[1]);
          fa_mma(dp[mi][2 * np + 1], c[mi], bb[2], bb[3]);
        }
      }
    }
    const bool need = fa_item_masked(qq0, qn, k0, kn, qk0);
#pragma unroll
    for (int mi = 0; mi < FA_MT; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int lr = wm * (FA_BR / 2) + mi * 16 + g + r * 8;
        const float L = cL[lr], dl = cD[lr];
        const float l2 = L == -FA_INF ? FA_INF : L * FA_LOG2E;
#pragma unroll
        for (int nt = 0; nt < FA_NS; ++nt) {
          const int lc = wn * (FA_BC / 4) + nt * 8 + c2;
          float p[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            p[e] = fa_exp2(fmaf(s[mi][nt][2 * r + e], FA_SL2, -l2));
            if (need) {
              const long long qrow = qq0 + lr, kcol = k0 + lc + e;
              if (FA_HIDDEN_AT(dsr, qrow, qn, kcol, kn)) p[e] = 0.0f;
            }
          }
          *(unsigned*)(sP + lr * FA_PS + lc) = fa_pack(p[0], p[1]);
          *(unsigned*)(sS + lr * FA_PS + lc) =
              fa_pack(p[0] * (dp[mi][nt][2 * r] - dl), p[1] * (dp[mi][nt][2 * r + 1] - dl));
        }
      }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < FA_BR / 16; ++kk) {
      unsigned pa[FA_KM][4], sa[FA_KM][4];
#pragma unroll
      for (int mi = 0; mi < FA_KM; ++mi) {
        const int off = (kk * 16 + (lane & 7) + (lane >> 4) * 8) * FA_PS + wk * (FA_BC / 4) + mi * 16 + ((lane >> 3) & 1) * 8;
        fa_ldm4t(pa[mi], fa_smem(sP + off));
        fa_ldm4t(sa[mi], fa_smem(sS + off));
      }
#pragma unroll
      for (int np = 0; np < FA_DN / 2; ++np) {
        const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, col = wd * (FA_D / 2) + np * 16 + (lane >> 4) * 8;
        unsigned bb[4];
        fa_ldm4t(bb, fa_smem(cO + fa_swz(r, col)));
#pragma unroll
        for (int mi = 0; mi < FA_KM; ++mi) {
          fa_mma(dva[mi][2 * np], pa[mi], bb[0], bb[1]);
          fa_mma(dva[mi][2 * np + 1], pa[mi], bb[2], bb[3]);
        }
        fa_ldm4t(bb, fa_smem(cQ + fa_swz(r, col)));
#pragma unroll
        for (int mi = 0; mi < FA_KM; ++mi) {
          fa_mma(dka[mi][2 * np], sa[mi], bb[0], bb[1]);
          fa_mma(dka[mi][2 * np + 1], sa[mi], bb[2], bb[3]);
        }
      }
    }
    float dq[FA_MT][FA_QN][4];
#pragma unroll
    for (int mi = 0; mi < FA_MT; ++mi)
#pragma unroll
      for (int i = 0; i < FA_QN; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq[mi][i][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < FA_BC / 16; ++kk) {
      unsigned a[FA_MT][4];
#pragma unroll
      for (int mi = 0; mi < FA_MT; ++mi)
        fa_ldm4(a[mi], fa_smem(sS + (wm * (FA_BR / 2) + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * FA_PS + kk * 16 + (lane >> 4) * 8));
#pragma unroll
      for (int np = 0; np < FA_QN / 2; ++np) {
        unsigned bb[4];
        fa_ldm4t(bb, fa_smem(sK + fa_swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, wc * (FA_D / 4) + np * 16 + (lane >> 4) * 8)));
#pragma unroll
        for (int mi = 0; mi < FA_MT; ++mi) {
          fa_mma(dq[mi][2 * np], a[mi], bb[0], bb[1]);
          fa_mma(dq[mi][2 * np + 1], a[mi], bb[2], bb[3]);
        }
      }
    }
    // dQ's reds, spread over the quad (fa_quad_spread) to cover whole sectors.
    unsigned long long* dg = dqa + ((b * FA_T + qp0) * FA_HQ + h) * FA_DG;
    const int qd = lane & 3;
#pragma unroll
    for (int mi = 0; mi < FA_MT; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const long long row = qq0 + wm * (FA_BR / 2) + mi * 16 + g + r * 8;
#pragma unroll
        for (int nt = 0; nt < FA_QN; ++nt) {
          if (wc * (FA_D / 4) + nt * 8 >= FA_DG) break;  // a padded head dim's zero columns (warp-uniform)
          float lo, hi;
          fa_quad_spread(dq[mi][nt][2 * r], dq[mi][nt][2 * r + 1], qd, &lo, &hi);
          if (row >= qn) continue;
          unsigned long long* p = dg + row * ors + wc * (FA_D / 4) + nt * 8 + qd;
          fa_red64(p, lo * FA_SCALE, dqmul);
          fa_red64(p + 4, hi * FA_SCALE, dqmul);
        }
      }
  }
  fa_wait<0>();
#pragma unroll
  for (int mi = 0; mi < FA_KM; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const long long row = k0 + wk * (FA_BC / 4) + mi * 16 + g + r * 8;
      if (row >= kn) continue;
#if FA_SPLIT
      // This head's parts of dK and dV, [B, S, Hq, D] fp32 each, stored.
      const long long off = ((b * FA_S + kp0 + row * FA_R) * FA_HQ + h0) * FA_DG + wd * (FA_D / 2) + c2;
#elif FA_ACC
      const long long off = ((b * FA_S + kp0 + row * FA_R) * FA_HKV + hk) * FA_DG + wd * (FA_D / 2) + c2;
#else
      // dK and dV where they live (Desc.Views).
      const long long offk = FA_AT(DK, b, kp0 + row * FA_R, hk) + wd * (FA_D / 2) + c2;
      const long long offv = FA_AT(DV, b, kp0 + row * FA_R, hk) + wd * (FA_D / 2) + c2;
#endif
#pragma unroll
      for (int nt = 0; nt < FA_DN; ++nt) {
        if (wd * (FA_D / 2) + nt * 8 >= FA_DG) break;  // a padded head dim's zero columns
#if FA_SPLIT
        *(float2*)(dk + off + nt * 8) = make_float2(dka[mi][nt][2 * r] * FA_SCALE, dka[mi][nt][2 * r + 1] * FA_SCALE);
        *(float2*)(dv + off + nt * 8) = make_float2(dva[mi][nt][2 * r], dva[mi][nt][2 * r + 1]);
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
        x.x += dka[mi][nt][2 * r] * FA_SCALE;
        x.y += dka[mi][nt][2 * r + 1] * FA_SCALE;
        y.x += dva[mi][nt][2 * r];
        y.y += dva[mi][nt][2 * r + 1];
        *pk = x;
        *pv = y;
#else
        *(unsigned*)(dk + offk + nt * 8) = fa_pack(dka[mi][nt][2 * r] * FA_SCALE, dka[mi][nt][2 * r + 1] * FA_SCALE);
        *(unsigned*)(dv + offv + nt * 8) = fa_pack(dva[mi][nt][2 * r], dva[mi][nt][2 * r + 1]);
#endif
      }
    }
}
#undef FA_GW
#undef loadq
`

// dqFixedSrc is the fixed point of the fused dQ sum. The bound: |dP_ij| ≤
// D·max|dO|·max|V|, so |dS_ij| ≤ P_ij·(D·max|dO|·max|V| + max|delta|) and
// |dQ_id| ≤ scale·max|K|·(D·max|dO|·max|V| + max|delta|), as Σ_j P_ij = 1; the
// factor 2 covers bf16 rounding of P and dS. The same bound holds for the sum of
// the parts' magnitudes. fa_dq_mul is 2^(FA_DQ_TOP−e) for the least e with
// bound < 2^e (e at least −64, so that it is a normal float): tier 1's int64
// sum keeps every partial sum below 2^62 units (FA_DQ_TOP = 62), tier 2's
// split-float pairs (FA_DQF, Desc.dqLowBits) below 2^(22+K). It is 0 when the
// bound is not finite (a NaN or Inf input) or so large that the unit is not a
// normal float, and dqconvert writes NaN.
const dqFixedSrc = `#ifndef FA_DQF
#define FA_DQF 0
#endif
#if FA_DQF
#define FA_DQ_TOP (22 + FA_DQK)
#else
#define FA_DQ_TOP 62
#endif
__device__ __forceinline__ float fa_dq_mul(const unsigned* mx) {
  const double mo = __uint_as_float(mx[0]), mk = __uint_as_float(mx[1]), mv = __uint_as_float(mx[2]);
  const double md = __uint_as_float(mx[3]);
  const double bnd = 2.0 * (double)FA_SCALE * mk * ((double)FA_DG * mo * mv + md);
  if (!(bnd <= 1e300)) return 0.0f;
  int e = -64;
  if (bnd != 0.0) frexp(bnd, &e);
  if (e > FA_DQ_TOP + 126) return 0.0f;
  if (e < -64) e = -64;
  return __int_as_float((127 + FA_DQ_TOP - e) << 23);
}
// fa_quad_spread takes one row of an 8-column n-tile held as the mma
// accumulators hold it (lane q of the quad: columns 2q, 2q + 1) and gives lane q
// columns q and 4 + q, by two exchanges, so that a warp's red over eight rows
// covers whole 32-byte sectors (eight rows, four words each).
__device__ __forceinline__ void fa_quad_spread(float v0, float v1, int qd, float* c0, float* c4) {
  const float x = __shfl_xor_sync(0xffffffffu, (qd & 1) ? v0 : v1, 1);
  const float lo = (qd & 1) ? x : v0, hi = (qd & 1) ? v1 : x;
  const float y = __shfl_xor_sync(0xffffffffu, (qd & 2) ? lo : hi, 2);
  *c0 = (qd & 2) ? y : lo;
  *c4 = (qd & 2) ? hi : y;
}
// fa_red64 adds x in units of 1/mul to *p (an integer atomic: any order, same
// bits). x·mul is exact (mul is a power of two) and below 2^62.
__device__ __forceinline__ void fa_red64(unsigned long long* p, float x, float mul) {
  const long long v = __float2ll_rn(x * mul);
  asm volatile("red.global.add.u64 [%0], %1;\n" :: "l"(p), "l"(v) : "memory");
}
#if FA_DQF
// fa_red2f adds x0 and x1 in units of 1/mul to the split-float pairs at p (16
// bytes: hi0, lo0, hi1, lo1; sm_90's vector red): v = rint(x·mul) is split
// exactly into hi = rint(v·2^−K) and lo = v − hi·2^K, |lo| ≤ 2^(K−1), integers
// both, so that the fp32 adds are exact and their order does not matter.
__device__ __forceinline__ void fa_red2f(float* p, float x0, float x1, float mul) {
  const float u = (float)(1 << FA_DQK), v0 = rintf(x0 * mul), v1 = rintf(x1 * mul);
  const float h0 = rintf(v0 * (1.0f / u)), h1 = rintf(v1 * (1.0f / u));
  const float l0 = fmaf(-h0, u, v0), l1 = fmaf(-h1, u, v1);
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "l"(p), "f"(h0), "f"(l0), "f"(h1), "f"(l1) : "memory");
}
#endif
`

// dqBoundSrc writes the maxima the fixed point's bound needs (blockIdx.y picks
// dO, K, V or delta): max |x| as float bits, reduced with integer max, so NaN
// (whose bits exceed Inf's) wins and the order does not matter.
const dqBoundSrc = `__device__ __forceinline__ unsigned fa_hmax(unsigned w, unsigned m) {
  return max(m, max((w & 0x7fffu) << 16, w & 0x7fff0000u));
}
extern "C" __global__ void __launch_bounds__(256) @KERNEL@(unsigned* __restrict__ ws,
    const fa_bf16* __restrict__ dout, const fa_bf16* __restrict__ k, const fa_bf16* __restrict__ v,
    const float* __restrict__ delta) {
  const int which = blockIdx.y;
  const long long stride = (long long)gridDim.x * 256, i0 = (long long)blockIdx.x * 256 + threadIdx.x;
  unsigned m = 0;
  if (which == 3) {
    for (long long i = i0; i < FA_B * FA_HQ * FA_LT; i += stride) m = max(m, __float_as_uint(delta[i]) & 0x7fffffffu);
  } else {
#if FA_KVVIEW
    // Rows of w 8-element words, r0 words apart, batches of rows rb words
    // apart (k and v where they live: Desc.Views).
    const long long w = (which == 0 ? FA_HQ : FA_HKV) * FA_DG / 8, rows = which == 0 ? FA_T : FA_S;
    const long long r0 = which == 0 ? w : which == 1 ? FA_KRS / 8 : FA_VRS / 8;
    const long long rb = which == 0 ? FA_T * w : which == 1 ? FA_KBS / 8 : FA_VBS / 8;
    const uint4* x = (const uint4*)(which == 0 ? dout : which == 1 ? k + FA_KO : v + FA_VO);
    const long long n = FA_B * rows * w;
    for (long long i = i0; i < n; i += stride) {
      const long long r = i / w, bb = r / rows;
      const uint4 u = x[bb * rb + (r - bb * rows) * r0 + (i - r * w)];
      m = fa_hmax(u.x, fa_hmax(u.y, fa_hmax(u.z, fa_hmax(u.w, m))));
    }
#else
    const uint4* x = (const uint4*)(which == 0 ? dout : which == 1 ? k : v);
    const long long n = (which == 0 ? FA_NQ : FA_B * FA_S * FA_HKV * FA_DG) / 8;
    for (long long i = i0; i < n; i += stride) {
      const uint4 w = x[i];
      m = fa_hmax(w.x, fa_hmax(w.y, fa_hmax(w.z, fa_hmax(w.w, m))));
    }
#endif
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ unsigned sm[8];
  if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < 8; ++w) m = max(m, sm[w]);
    atomicMax(ws + 2 * FA_NQ + which, m);
  }
}
`

// dqConvertSrc rounds the fused fixed-point dQ sum to bf16 (NaN everywhere when
// the bound was not finite).
const dqConvertSrc = `extern "C" __global__ void __launch_bounds__(256) @KERNEL@(fa_bf16* __restrict__ dq, const unsigned* __restrict__ ws) {
  const long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 2;
  if (i >= FA_NQ) return;
  const float mul = fa_dq_mul(ws + 2 * FA_NQ);
  float a = __int_as_float(0x7fc00000), c = a;
  if (mul != 0.0f) {
    const double inv = 1.0 / (double)mul;
#if FA_DQF
    const float4 x = *(const float4*)(ws + 2 * i);  // (hi, lo) of elements i and i + 1
    a = (float)(((double)x.x * (double)(1 << FA_DQK) + (double)x.y) * inv);
    c = (float)(((double)x.z * (double)(1 << FA_DQK) + (double)x.w) * inv);
#else
    const long long* x = (const long long*)ws;
    a = (float)((double)x[i] * inv);
    c = (float)((double)x[i + 1] * inv);
#endif
  }
  // Element i of [B, T, Hq·D] where dq lives (Desc.Views).
  const long long bt = i / (FA_HQ * FA_DG);
  *(unsigned*)(dq + FA_AT(DQ, bt / FA_T, bt % FA_T, 0) + i % (FA_HQ * FA_DG)) = fa_pack(a, c);
}
`

// dkvReduceSrc sums split heads' parts (Desc.SplitHeads): dk and dv [B, S, Hkv,
// D] bf16 from the parts pk and pv [B, S, Hq, D] fp32, a group's G heads added
// in head order in fp32; a thread takes one pair of columns.
const dkvReduceSrc = `extern "C" __global__ void __launch_bounds__(256) @KERNEL@(fa_bf16* __restrict__ dk,
    fa_bf16* __restrict__ dv, const float* __restrict__ parts_k, const float* __restrict__ parts_v) {
  const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i >= FA_N) return;
  const long long e = 2 * i, c = e % FA_DG, r = e / FA_DG, hk = r % FA_HKV, bs = r / FA_HKV;
  const float* pk = parts_k + (bs * FA_HQ + hk * FA_G) * FA_DG + c;
  const float* pv = parts_v + (bs * FA_HQ + hk * FA_G) * FA_DG + c;
  float2 sk = make_float2(0.0f, 0.0f), sv = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int m = 0; m < FA_G; ++m) {
    const float2 a = *(const float2*)(pk + m * FA_DG), b = *(const float2*)(pv + m * FA_DG);
    sk.x += a.x, sk.y += a.y, sv.x += b.x, sv.y += b.y;
  }
  const long long ob = bs / FA_S, os = bs % FA_S;  // where dk and dv live (Desc.Views)
  *(unsigned*)(dk + FA_AT(DK, ob, os, hk) + c) = fa_pack(sk.x, sk.y);
  *(unsigned*)(dv + FA_AT(DV, ob, os, hk) + c) = fa_pack(sv.x, sv.y);
}
`
