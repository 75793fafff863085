package flash

// dkdvSrc: one CTA per (key tile of FA_BC rows, kv head, batch × segment),
// FA_BC/16 warps of 16 keys each. K and V stay in shared memory; the CTA walks
// the query heads of its group and, per head, the query tiles of FA_BR rows that
// see its keys, streaming Q, dO, lse and delta through FA_STAGES buffers. Per
// tile: Sᵀ = K·Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), dV += Pᵀ·dO,
// dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − delta), dK += dSᵀ·Q. The dK and dV of a key are
// summed by one thread in a fixed order: deterministic, no atomics. (The fused
// backward, DQFused, runs dkdvqSrc instead.)
const dkdvSrc = `extern "C" __global__ void __launch_bounds__(FA_NT) @KERNEL@(FA_OT* __restrict__ dk, FA_OT* __restrict__ dv,
    const fa_bf16* __restrict__ q, const fa_bf16* __restrict__ k, const fa_bf16* __restrict__ v,
    const fa_bf16* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta
    ) {
  extern __shared__ __align__(128) unsigned char fa_sh[];
  fa_bf16* sK = (fa_bf16*)fa_sh;
  fa_bf16* sV = sK + FA_BC * FA_D;
  fa_bf16* sQ = sV + FA_BC * FA_D;
  fa_bf16* sO = sQ + FA_STAGES * FA_BR * FA_D;
  float* sL = (float*)(sO + FA_STAGES * FA_BR * FA_D);
  float* sDl = sL + FA_STAGES * FA_BR;
  const long long kt = blockIdx.x;
  const int hk = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const long long b = blockIdx.z / FA_NSEG, sg = blockIdx.z % FA_NSEG;
  const int h0 = hk * FA_G + (FA_MEMBER >= 0 ? FA_MEMBER : 0);
  const int nh = FA_MEMBER >= 0 ? 1 : FA_G;
  long long kp0, kn, qp0, qn;
  fa_geom(sg, h0, FA_S, &kp0, &kn);
  fa_geom(sg, h0, FA_T, &qp0, &qn);
  const long long k0 = kt * FA_BC;
  if (k0 >= kn) return;
  long long first = 0;
  if (FA_CAUSAL) {
    first = FA_KPOS + k0 - FA_QPOS;
    if (first < 0) first = 0;
  }
  const long long it0 = first / FA_BR;
  const long long qtiles = (qn + FA_BR - 1) / FA_BR;
  const int nit = qtiles > it0 ? (int)(qtiles - it0) : 0;
  const int nitems = nh * nit;
#define qtile(w) (it0 + (w) % nit)
  const long long qrs = (long long)FA_HQ * FA_DG * FA_R, krs = (long long)FA_HKV * FA_DG * FA_R;
  const fa_bf16* kg = k + ((b * FA_S + kp0) * FA_HKV + hk) * FA_DG;
  const fa_bf16* vg = v + ((b * FA_S + kp0) * FA_HKV + hk) * FA_DG;
  fa_load_tile<FA_BC, FA_NT>(sK, kg, krs, k0, kn, tid);
  fa_load_tile<FA_BC, FA_NT>(sV, vg, krs, k0, kn, tid);
#pragma unroll
  for (int s = 0; s < FA_STAGES - 1; ++s) {
    if (s < nitems) {
      const int h = h0 + s / nit;
      const long long qq0 = qtile(s) * FA_BR;
      const long long qo = ((b * FA_T + qp0) * FA_HQ + h) * FA_DG;
      fa_load_tile<FA_BR, FA_NT>(sQ + s * FA_BR * FA_D, q + qo, qrs, qq0, qn, tid);
      fa_load_tile<FA_BR, FA_NT>(sO + s * FA_BR * FA_D, dout + qo, qrs, qq0, qn, tid);
      const long long lo = (b * FA_HQ + h) * FA_T + qp0;
      if (tid < FA_BR) {
        const bool ok = qq0 + tid < qn;
        fa_cp4(fa_smem(sL + s * FA_BR + tid), lse + lo + (ok ? (qq0 + tid) * FA_R : 0), ok);
      } else if (tid < 2 * FA_BR) {
        const int t = tid - FA_BR;
        const bool ok = qq0 + t < qn;
        fa_cp4(fa_smem(sDl + s * FA_BR + t), delta + lo + (ok ? (qq0 + t) * FA_R : 0), ok);
      }
    }
    fa_commit();
  }
  const int g = lane >> 2, c2 = (lane & 3) * 2;
  const long long kr0 = k0 + warp * 16 + g;
  float dka[FA_D / 8][4], dva[FA_D / 8][4];
#pragma unroll
  for (int i = 0; i < FA_D / 8; ++i) {
    dka[i][0] = dka[i][1] = dka[i][2] = dka[i][3] = 0.0f;
    dva[i][0] = dva[i][1] = dva[i][2] = dva[i][3] = 0.0f;
  }
  for (int w = 0; w < nitems; ++w) {
    fa_wait<FA_STAGES - 2>();
    __syncthreads();
    {
      const int wn = w + FA_STAGES - 1;
      if (wn < nitems) {
        const int st = wn % FA_STAGES;
        const int h = h0 + wn / nit;
        const long long qq0 = qtile(wn) * FA_BR;
        const long long qo = ((b * FA_T + qp0) * FA_HQ + h) * FA_DG;
        fa_load_tile<FA_BR, FA_NT>(sQ + st * FA_BR * FA_D, q + qo, qrs, qq0, qn, tid);
        fa_load_tile<FA_BR, FA_NT>(sO + st * FA_BR * FA_D, dout + qo, qrs, qq0, qn, tid);
        const long long lo = (b * FA_HQ + h) * FA_T + qp0;
        if (tid < FA_BR) {
          const bool ok = qq0 + tid < qn;
          fa_cp4(fa_smem(sL + st * FA_BR + tid), lse + lo + (ok ? (qq0 + tid) * FA_R : 0), ok);
        } else if (tid < 2 * FA_BR) {
          const int t = tid - FA_BR;
          const bool ok = qq0 + t < qn;
          fa_cp4(fa_smem(sDl + st * FA_BR + t), delta + lo + (ok ? (qq0 + t) * FA_R : 0), ok);
        }
      }
      fa_commit();
    }
    const int st = w % FA_STAGES;
    const fa_bf16* cQ = sQ + st * FA_BR * FA_D;
    const fa_bf16* cO = sO + st * FA_BR * FA_D;
    const float* cL = sL + st * FA_BR;
    const float* cD = sDl + st * FA_BR;
    const long long qq0 = qtile(w) * FA_BR;
    float sT[FA_BR / 8][4];
#pragma unroll
    for (int i = 0; i < FA_BR / 8; ++i) sT[i][0] = sT[i][1] = sT[i][2] = sT[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < FA_D / 16; ++kk) {
      unsigned a[4];
      fa_ldm4(a, fa_smem(sK + fa_swz(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 16 + (lane >> 4) * 8)));
#pragma unroll
      for (int np = 0; np < FA_BR / 16; ++np) {
        unsigned bb[4];
        fa_ldm4(bb, fa_smem(cQ + fa_swz(np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 16 + ((lane >> 3) & 1) * 8)));
        fa_mma(sT[2 * np], a, bb[0], bb[1]);
        fa_mma(sT[2 * np + 1], a, bb[2], bb[3]);
      }
    }
    const bool need = qq0 + FA_BR > qn || (FA_CAUSAL && FA_QPOS + qq0 < FA_KPOS + k0 + FA_BC - 1);
#pragma unroll
    for (int nt = 0; nt < FA_BR / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = nt * 8 + c2 + (e & 1);
        const float L = cL[qc];
        const float l2 = L == -FA_INF ? FA_INF : L * FA_LOG2E;
        float p = fa_exp2(fmaf(sT[nt][e], FA_SL2, -l2));
        if (need) {
          const long long qrow = qq0 + qc, krow = kr0 + (e >> 1) * 8;
          if (qrow >= qn || (FA_CAUSAL && FA_KPOS + krow > FA_QPOS + qrow)) p = 0.0f;
        }
        sT[nt][e] = p;
      }
#pragma unroll
    for (int kk = 0; kk < FA_BR / 16; ++kk) {
      unsigned a[4];
      a[0] = fa_pack(sT[2 * kk][0], sT[2 * kk][1]);
      a[1] = fa_pack(sT[2 * kk][2], sT[2 * kk][3]);
      a[2] = fa_pack(sT[2 * kk + 1][0], sT[2 * kk + 1][1]);
      a[3] = fa_pack(sT[2 * kk + 1][2], sT[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < FA_D / 16; ++dp) {
        unsigned bb[4];
        fa_ldm4t(bb, fa_smem(cO + fa_swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 16 + (lane >> 4) * 8)));
        fa_mma(dva[2 * dp], a, bb[0], bb[1]);
        fa_mma(dva[2 * dp + 1], a, bb[2], bb[3]);
      }
    }
    float dpT[FA_BR / 8][4];
#pragma unroll
    for (int i = 0; i < FA_BR / 8; ++i) dpT[i][0] = dpT[i][1] = dpT[i][2] = dpT[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < FA_D / 16; ++kk) {
      unsigned a[4];
      fa_ldm4(a, fa_smem(sV + fa_swz(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 16 + (lane >> 4) * 8)));
#pragma unroll
      for (int np = 0; np < FA_BR / 16; ++np) {
        unsigned bb[4];
        fa_ldm4(bb, fa_smem(cO + fa_swz(np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 16 + ((lane >> 3) & 1) * 8)));
        fa_mma(dpT[2 * np], a, bb[0], bb[1]);
        fa_mma(dpT[2 * np + 1], a, bb[2], bb[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < FA_BR / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) sT[nt][e] *= dpT[nt][e] - cD[nt * 8 + c2 + (e & 1)];
#pragma unroll
    for (int kk = 0; kk < FA_BR / 16; ++kk) {
      unsigned a[4];
      a[0] = fa_pack(sT[2 * kk][0], sT[2 * kk][1]);
      a[1] = fa_pack(sT[2 * kk][2], sT[2 * kk][3]);
      a[2] = fa_pack(sT[2 * kk + 1][0], sT[2 * kk + 1][1]);
      a[3] = fa_pack(sT[2 * kk + 1][2], sT[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < FA_D / 16; ++dp) {
        unsigned bb[4];
        fa_ldm4t(bb, fa_smem(cQ + fa_swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 16 + (lane >> 4) * 8)));
        fa_mma(dka[2 * dp], a, bb[0], bb[1]);
        fa_mma(dka[2 * dp + 1], a, bb[2], bb[3]);
      }
    }
  }
#undef qtile
  fa_wait<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = kr0 + r * 8;
    if (row >= kn) continue;
    const long long off = ((b * FA_S + kp0 + row * FA_R) * FA_HKV + hk) * FA_DG;
#pragma unroll
    for (int dt = 0; dt < FA_D / 8; ++dt) {
      if (dt * 8 >= FA_DG) break;  // a padded head dim's zero columns
#if FA_ACC
      float2* pk = (float2*)(dk + off + dt * 8 + c2);
      float2* pv = (float2*)(dv + off + dt * 8 + c2);
      float2 x = *pk, y = *pv;
      x.x += dka[dt][2 * r] * FA_SCALE;
      x.y += dka[dt][2 * r + 1] * FA_SCALE;
      y.x += dva[dt][2 * r];
      y.y += dva[dt][2 * r + 1];
      *pk = x;
      *pv = y;
#else
      *(unsigned*)(dk + off + dt * 8 + c2) = fa_pack(dka[dt][2 * r] * FA_SCALE, dka[dt][2 * r + 1] * FA_SCALE);
      *(unsigned*)(dv + off + dt * 8 + c2) = fa_pack(dva[dt][2 * r], dva[dt][2 * r + 1]);
#endif
    }
  }
}
`

// dqSrc: one CTA per (query tile of FA_BR rows, head, batch × segment), walking
// the key tiles the tile sees in order: S = Q·Kᵀ, P = exp2(S·scale·log2e −
// lse·log2e), dP = dO·Vᵀ, dS = P∘(dP − delta), dQ += dS·K. A row's dQ is summed
// by one thread in a fixed order: bitwise reproducible without atomics.
const dqSrc = `extern "C" __global__ void __launch_bounds__(FA_NT) @KERNEL@(FA_OT* __restrict__ dq,
    const fa_bf16* __restrict__ q, const fa_bf16* __restrict__ k, const fa_bf16* __restrict__ v,
    const fa_bf16* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta) {
  extern __shared__ __align__(128) unsigned char fa_sh[];
  fa_bf16* sQ = (fa_bf16*)fa_sh;
  fa_bf16* sO = sQ + FA_BR * FA_D;
  fa_bf16* sK = sO + FA_BR * FA_D;
  fa_bf16* sV = sK + FA_STAGES * FA_BC * FA_D;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int h = blockIdx.y, hk = h / FA_G;
  const long long b = blockIdx.z / FA_NSEG, sg = blockIdx.z % FA_NSEG;
  long long qp0, qn, kp0, kn;
  fa_geom(sg, h, FA_T, &qp0, &qn);
  fa_geom(sg, h, FA_S, &kp0, &kn);
  const long long tile = FA_CAUSAL ? (long long)(gridDim.x - 1 - blockIdx.x) : (long long)blockIdx.x;
  const long long q0 = tile * FA_BR;
  if (q0 >= qn) return;
  long long kend = kn;
  if (FA_CAUSAL) {
    const long long lim = FA_QPOS + q0 + FA_BR - FA_KPOS;
    if (lim < kend) kend = lim;
  }
  const int nkt = kend > 0 ? (int)((kend + FA_BC - 1) / FA_BC) : 0;
  const long long qrs = (long long)FA_HQ * FA_DG * FA_R, krs = (long long)FA_HKV * FA_DG * FA_R;
  const long long qo = ((b * FA_T + qp0) * FA_HQ + h) * FA_DG;
  const fa_bf16* kg = k + ((b * FA_S + kp0) * FA_HKV + hk) * FA_DG;
  const fa_bf16* vg = v + ((b * FA_S + kp0) * FA_HKV + hk) * FA_DG;
  fa_load_tile<FA_BR, FA_NT>(sQ, q + qo, qrs, q0, qn, tid);
  fa_load_tile<FA_BR, FA_NT>(sO, dout + qo, qrs, q0, qn, tid);
#pragma unroll
  for (int s = 0; s < FA_STAGES - 1; ++s) {
    if (s < nkt) {
      fa_load_tile<FA_BC, FA_NT>(sK + s * FA_BC * FA_D, kg, krs, (long long)s * FA_BC, kn, tid);
      fa_load_tile<FA_BC, FA_NT>(sV + s * FA_BC * FA_D, vg, krs, (long long)s * FA_BC, kn, tid);
    }
    fa_commit();
  }
  const int g = lane >> 2, c2 = (lane & 3) * 2;
  const int wr = warp * 16 * FA_WM;
  const long long r0 = q0 + wr + g;
  float l2[FA_WM][2], dl[FA_WM][2];
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = r0 + mi * 16 + r * 8;
    const long long li = (b * FA_HQ + h) * FA_T + qp0 + row * FA_R;
    const float L = row < qn ? lse[li] : -FA_INF;
    l2[mi][r] = L == -FA_INF ? FA_INF : L * FA_LOG2E;
    dl[mi][r] = row < qn ? delta[li] : 0.0f;
  }
  float acc[FA_WM][FA_D / 8][4];
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
    for (int i = 0; i < FA_D / 8; ++i) acc[mi][i][0] = acc[mi][i][1] = acc[mi][i][2] = acc[mi][i][3] = 0.0f;
  for (int j = 0; j < nkt; ++j) {
    fa_wait<FA_STAGES - 2>();
    __syncthreads();
    {
      const int jn = j + FA_STAGES - 1;
      if (jn < nkt) {
        const int st = jn % FA_STAGES;
        fa_load_tile<FA_BC, FA_NT>(sK + st * FA_BC * FA_D, kg, krs, (long long)jn * FA_BC, kn, tid);
        fa_load_tile<FA_BC, FA_NT>(sV + st * FA_BC * FA_D, vg, krs, (long long)jn * FA_BC, kn, tid);
      }
      fa_commit();
    }
    const fa_bf16* cK = sK + (j % FA_STAGES) * FA_BC * FA_D;
    const fa_bf16* cV = sV + (j % FA_STAGES) * FA_BC * FA_D;
    float s[FA_WM][FA_BC / 8][4], dp[FA_WM][FA_BC / 8][4];
#pragma unroll
    for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
    for (int i = 0; i < FA_BC / 8; ++i) {
      s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.0f;
      dp[mi][i][0] = dp[mi][i][1] = dp[mi][i][2] = dp[mi][i][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < FA_D / 16; ++kk) {
      unsigned a[FA_WM][4], c[FA_WM][4];
#pragma unroll
      for (int mi = 0; mi < FA_WM; ++mi) {
        fa_ldm4(a[mi], fa_smem(sQ + fa_swz(wr + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 16 + (lane >> 4) * 8)));
        fa_ldm4(c[mi], fa_smem(sO + fa_swz(wr + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 16 + (lane >> 4) * 8)));
      }
#pragma unroll
      for (int np = 0; np < FA_BC / 16; ++np) {
        unsigned bb[4];
        const int row = np * 16 + (lane & 7) + ((lane >> 4) << 3), col = kk * 16 + ((lane >> 3) & 1) * 8;
        fa_ldm4(bb, fa_smem(cK + fa_swz(row, col)));
#pragma unroll
        for (int mi = 0; mi < FA_WM; ++mi) {
          fa_mma(s[mi][2 * np], a[mi], bb[0], bb[1]);
          fa_mma(s[mi][2 * np + 1], a[mi], bb[2], bb[3]);
        }
        fa_ldm4(bb, fa_smem(cV + fa_swz(row, col)));
#pragma unroll
        for (int mi = 0; mi < FA_WM; ++mi) {
          fa_mma(dp[mi][2 * np], c[mi], bb[0], bb[1]);
          fa_mma(dp[mi][2 * np + 1], c[mi], bb[2], bb[3]);
        }
      }
    }
    const long long k0 = (long long)j * FA_BC;
    const bool need = k0 + FA_BC > kn || (FA_CAUSAL && FA_KPOS + k0 + FA_BC - 1 > FA_QPOS + q0 + wr);
#pragma unroll
    for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
    for (int nt = 0; nt < FA_BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float p = fa_exp2(fmaf(s[mi][nt][e], FA_SL2, -l2[mi][r]));
        if (need) {
          const long long col = k0 + nt * 8 + c2 + (e & 1), row = r0 + mi * 16 + r * 8;
          if (col >= kn || (FA_CAUSAL && FA_KPOS + col > FA_QPOS + row)) p = 0.0f;
        }
        s[mi][nt][e] = p * (dp[mi][nt][e] - dl[mi][r]);
      }
#pragma unroll
    for (int kk = 0; kk < FA_BC / 16; ++kk) {
      unsigned a[FA_WM][4];
#pragma unroll
      for (int mi = 0; mi < FA_WM; ++mi) {
        a[mi][0] = fa_pack(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        a[mi][1] = fa_pack(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        a[mi][2] = fa_pack(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        a[mi][3] = fa_pack(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp2 = 0; dp2 < FA_D / 16; ++dp2) {
        unsigned bb[4];
        fa_ldm4t(bb, fa_smem(cK + fa_swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp2 * 16 + (lane >> 4) * 8)));
#pragma unroll
        for (int mi = 0; mi < FA_WM; ++mi) {
          fa_mma(acc[mi][2 * dp2], a[mi], bb[0], bb[1]);
          fa_mma(acc[mi][2 * dp2 + 1], a[mi], bb[2], bb[3]);
        }
      }
    }
  }
  fa_wait<0>();
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = r0 + mi * 16 + r * 8;
    if (row >= qn) continue;
    FA_OT* p = dq + ((b * FA_T + qp0 + row * FA_R) * FA_HQ + h) * FA_DG;
#pragma unroll
    for (int dt = 0; dt < FA_D / 8; ++dt) {
      if (dt * 8 >= FA_DG) break;  // a padded head dim's zero columns
#if FA_ACC
      float2* x = (float2*)(p + dt * 8 + c2);
      float2 y = *x;
      y.x += acc[mi][dt][2 * r] * FA_SCALE;
      y.y += acc[mi][dt][2 * r + 1] * FA_SCALE;
      *x = y;
#else
      *(unsigned*)(p + dt * 8 + c2) = fa_pack(acc[mi][dt][2 * r] * FA_SCALE, acc[mi][dt][2 * r + 1] * FA_SCALE);
#endif
    }
  }
}
`
