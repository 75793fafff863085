package flash

// fwdSrc is the forward: one CTA per (query tile of FA_BR rows, head, batch ×
// segment), FA_BR/16 warps of 16 query rows each. K and V tiles of FA_BC rows
// stream through FA_STAGES shared buffers with cp.async; S = Q·Kᵀ and O += P·V run
// on mma.sync with fp32 accumulators; the softmax is online in fp32 with exp2 and
// the scale folded into log2(e). Causal CTAs visit only the key tiles left of
// their diagonal and mask only the tiles that cross it (and a ragged last tile).
// Causal CTAs run longest first (the grid's last query tiles are launched first).
const fwdSrc = `extern "C" __global__ void __launch_bounds__(FA_NT) @KERNEL@(FA_OT* __restrict__ o, float* __restrict__ lse,
    const fa_bf16* __restrict__ q, const fa_bf16* __restrict__ k, const fa_bf16* __restrict__ v FA_DOCS_ARG) {
  extern __shared__ __align__(128) unsigned char fa_sh[];
  fa_bf16* sQ = (fa_bf16*)fa_sh;
  fa_bf16* sK = sQ + FA_BR * FA_D;
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
  const long long* dsr = FA_DSR(b);
  int j0, nkt;
  fa_keys(q0, kn, dsr, &j0, &nkt);
  const long long qrs = FA_QRS * FA_R, krs = FA_KRS * FA_R, vrs = FA_VRS * FA_R;
  const fa_bf16* qg = q + FA_AT(Q, b, qp0, h);
  const fa_bf16* kg = k + FA_AT(K, b, kp0, hk);
  const fa_bf16* vg = v + FA_AT(V, b, kp0, hk);
  fa_load_tile<FA_BR, FA_NT>(sQ, qg, qrs, q0, qn, tid);
#pragma unroll
  for (int s = 0; s < FA_STAGES - 1; ++s) {
    const int js = j0 + s;
    if (js < nkt) {
      const int st = js % FA_STAGES;
      fa_load_tile<FA_BC, FA_NT>(sK + st * FA_BC * FA_D, kg, krs, (long long)js * FA_BC, kn, tid);
      fa_load_tile<FA_BC, FA_NT>(sV + st * FA_BC * FA_D, vg, vrs, (long long)js * FA_BC, kn, tid);
    }
    fa_commit();
  }
  const int g = lane >> 2, c2 = (lane & 3) * 2;
  // Warp w owns FA_WM m-tiles of 16 query rows: rows q0 + w·16·FA_WM + mi·16 + g (+8).
  const int wr = warp * 16 * FA_WM;
  const long long r0 = q0 + wr + g;
  // ds0[mi][r] is the first visible key of this thread's row r0 + mi·16 + 8r,
  // and dmax the largest: key tiles at or past it need no document or window
  // mask.
  long long ds0[FA_WM][2], dmax = 0;
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi) ds0[mi][0] = ds0[mi][1] = 0;
#if FA_LEFT
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const long long row = r0 + mi * 16 + r * 8;
      ds0[mi][r] = row < qn ? fa_start(dsr, row) : 0;
      dmax = ds0[mi][r] > dmax ? ds0[mi][r] : dmax;
    }
#endif
#if FA_QREG
  unsigned qf[FA_D / 16][4];
#endif
  float acc[FA_WM][FA_D / 8][4];
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
    for (int i = 0; i < FA_D / 8; ++i) acc[mi][i][0] = acc[mi][i][1] = acc[mi][i][2] = acc[mi][i][3] = 0.0f;
  float m[FA_WM][2], l[FA_WM][2];
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi) m[mi][0] = m[mi][1] = -FA_INF, l[mi][0] = l[mi][1] = 0.0f;
  for (int j = j0; j < nkt; ++j) {
    fa_wait<FA_STAGES - 2>();
    __syncthreads();
#if FA_QREG
    if (j == j0) {
#pragma unroll
      for (int kk = 0; kk < FA_D / 16; ++kk)
        fa_ldm4(qf[kk], fa_smem(sQ + fa_swz(wr + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 16 + (lane >> 4) * 8)));
    }
#endif
    {
      const int jn = j + FA_STAGES - 1;
      if (jn < nkt) {
        const int st = jn % FA_STAGES;
        fa_load_tile<FA_BC, FA_NT>(sK + st * FA_BC * FA_D, kg, krs, (long long)jn * FA_BC, kn, tid);
        fa_load_tile<FA_BC, FA_NT>(sV + st * FA_BC * FA_D, vg, vrs, (long long)jn * FA_BC, kn, tid);
      }
      fa_commit();
    }
    const fa_bf16* cK = sK + (j % FA_STAGES) * FA_BC * FA_D;
    const fa_bf16* cV = sV + (j % FA_STAGES) * FA_BC * FA_D;
    float s[FA_WM][FA_BC / 8][4];
#pragma unroll
    for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
      for (int i = 0; i < FA_BC / 8; ++i) s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < FA_D / 16; ++kk) {
#if FA_QREG
      const unsigned* a0 = qf[kk];
#else
      unsigned qa[FA_WM][4];
#pragma unroll
      for (int mi = 0; mi < FA_WM; ++mi)
        fa_ldm4(qa[mi], fa_smem(sQ + fa_swz(wr + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 16 + (lane >> 4) * 8)));
#endif
#pragma unroll
      for (int np = 0; np < FA_BC / 16; ++np) {
        unsigned bb[4];
        fa_ldm4(bb, fa_smem(cK + fa_swz(np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 16 + ((lane >> 3) & 1) * 8)));
#pragma unroll
        for (int mi = 0; mi < FA_WM; ++mi) {
#if FA_QREG
          const unsigned* a = a0;
#else
          const unsigned* a = qa[mi];
#endif
          fa_mma(s[mi][2 * np], a, bb[0], bb[1]);
          fa_mma(s[mi][2 * np + 1], a, bb[2], bb[3]);
        }
      }
    }
    const long long k0 = (long long)j * FA_BC;
    if (fa_keys_masked(k0, kn, q0 + wr, dmax)) {
#pragma unroll
      for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
        for (int nt = 0; nt < FA_BC / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const long long col = k0 + nt * 8 + c2 + (e & 1), row = r0 + mi * 16 + (e >> 1) * 8;
            if (fa_hidden(row, col, kn, ds0[mi][e >> 1]))
              s[mi][nt][e] = -FA_INF;
          }
    }
#pragma unroll
    for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[mi][r];
#pragma unroll
      for (int nt = 0; nt < FA_BC / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * r], s[mi][nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float ms = mx == -FA_INF ? 0.0f : mx * FA_SL2;
      const float corr = fa_exp2(m[mi][r] * FA_SL2 - ms);
      m[mi][r] = mx;
      float ls = 0.0f;
#pragma unroll
      for (int nt = 0; nt < FA_BC / 8; ++nt) {
        const float p0 = fa_exp2(fmaf(s[mi][nt][2 * r], FA_SL2, -ms)), p1 = fa_exp2(fmaf(s[mi][nt][2 * r + 1], FA_SL2, -ms));
        s[mi][nt][2 * r] = p0;
        s[mi][nt][2 * r + 1] = p1;
        ls += p0 + p1;
      }
      l[mi][r] = l[mi][r] * corr + ls;
#pragma unroll
      for (int dt = 0; dt < FA_D / 8; ++dt) {
        acc[mi][dt][2 * r] *= corr;
        acc[mi][dt][2 * r + 1] *= corr;
      }
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
      for (int dp = 0; dp < FA_D / 16; ++dp) {
        unsigned bb[4];
        fa_ldm4t(bb, fa_smem(cV + fa_swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 16 + (lane >> 4) * 8)));
#pragma unroll
        for (int mi = 0; mi < FA_WM; ++mi) {
          fa_mma(acc[mi][2 * dp], a[mi], bb[0], bb[1]);
          fa_mma(acc[mi][2 * dp + 1], a[mi], bb[2], bb[3]);
        }
      }
    }
  }
  fa_wait<0>();
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[mi][r] += __shfl_xor_sync(0xffffffffu, l[mi][r], 1);
    l[mi][r] += __shfl_xor_sync(0xffffffffu, l[mi][r], 2);
  }
#if FA_ACC
  float la[FA_WM][2], lb[FA_WM][2];
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = r0 + mi * 16 + r * 8;
    lb[mi][r] = l[mi][r] > 0.0f ? m[mi][r] * FA_SCALE + logf(l[mi][r]) : -FA_INF;
    la[mi][r] = row < qn ? lse[(b * FA_HQ + h) * FA_T + qp0 + row * FA_R] : -FA_INF;
  }
  __syncwarp();
#endif
#pragma unroll
  for (int mi = 0; mi < FA_WM; ++mi)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = r0 + mi * 16 + r * 8;
    if (row >= qn) continue;
    const long long pos = qp0 + row * FA_R;
    FA_OT* orow = o + ((b * FA_T + pos) * FA_HQ + h) * FA_DG;
    const float inv = l[mi][r] > 0.0f ? 1.0f / l[mi][r] : 0.0f;
#if FA_ACC
    if (lb[mi][r] == -FA_INF) continue;
    const float mx = fmaxf(la[mi][r], lb[mi][r]);
    float wa = expf(la[mi][r] - mx), wb = expf(lb[mi][r] - mx);
    const float sum = wa + wb;
    wa /= sum;
    wb = wb / sum * inv;
#pragma unroll
    for (int dt = 0; dt < FA_D / 8; ++dt) {
      if (dt * 8 >= FA_DG) break;  // a padded head dim's zero columns
      float2* p = (float2*)(orow + dt * 8 + c2);
      float2 x = *p;
      x.x = wa * x.x + wb * acc[mi][dt][2 * r];
      x.y = wa * x.y + wb * acc[mi][dt][2 * r + 1];
      *p = x;
    }
    if ((lane & 3) == 0) lse[(b * FA_HQ + h) * FA_T + pos] = mx + logf(sum);
#else
#pragma unroll
    for (int dt = 0; dt < FA_D / 8; ++dt)
      if (dt * 8 < FA_DG) *(unsigned*)(orow + dt * 8 + c2) = fa_pack(acc[mi][dt][2 * r] * inv, acc[mi][dt][2 * r + 1] * inv);
    if ((lane & 3) == 0) lse[(b * FA_HQ + h) * FA_T + pos] = l[mi][r] > 0.0f ? m[mi][r] * FA_SCALE + logf(l[mi][r]) : -FA_INF;
#endif
  }
}
`

// deltaSrc is the backward's preprocessing: delta = rowsum(dO ∘ O) per (batch,
// head, row), one warp per row, in fp32.
const deltaSrc = `extern "C" __global__ void __launch_bounds__(256) @KERNEL@(float* __restrict__ delta,
    const fa_bf16* __restrict__ o, const fa_bf16* __restrict__ dout) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long t = (long long)blockIdx.x * 8 + warp;
  const int h = blockIdx.y;
  const long long b = blockIdx.z;
  if (t >= FA_T) return;
  float s = 0.0f;
#if FA_DG % 64 == 0
  // Each lane sums FA_DG/32 neighbours, pairs at a time.
  const long long off = ((b * FA_T + t) * FA_HQ + h) * FA_DG + lane * (FA_DG / 32);
  const unsigned* op = (const unsigned*)(o + off);
  const unsigned* dp = (const unsigned*)(dout + off);
#pragma unroll
  for (int i = 0; i < FA_DG / 64; ++i) {
    const unsigned a = op[i], c = dp[i];
    s += __uint_as_float(a << 16) * __uint_as_float(c << 16) + __uint_as_float(a & 0xffff0000u) * __uint_as_float(c & 0xffff0000u);
  }
#else
  // Another even head dim: lane l sums the pairs at 2l, 2l + 64, ...
  const long long off = ((b * FA_T + t) * FA_HQ + h) * FA_DG;
  const unsigned* op = (const unsigned*)(o + off);
  const unsigned* dp = (const unsigned*)(dout + off);
#pragma unroll
  for (int i = lane; i < FA_DG / 2; i += 32) {
    const unsigned a = op[i], c = dp[i];
    s += __uint_as_float(a << 16) * __uint_as_float(c << 16) + __uint_as_float(a & 0xffff0000u) * __uint_as_float(c & 0xffff0000u);
  }
#endif
#pragma unroll
  for (int x = 16; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
  if (lane == 0) delta[(b * FA_HQ + h) * FA_T + t] = s;
}
`

// convertSrc rounds an fp32 buffer (a dilated or ring accumulator) to bf16,
// eight elements a thread: two 16-byte loads and one 16-byte store when both
// buffers are 16-byte aligned, else pairs (a plan's buffer may sit at any
// 4-byte offset).
const convertSrc = `extern "C" __global__ void __launch_bounds__(256) @KERNEL@(fa_bf16* __restrict__ y, const float* __restrict__ x) {
  const long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 8;
  if (i >= FA_N) return;
  if (i + 8 <= FA_N && (((unsigned long long)y | (unsigned long long)x) & 15) == 0) {
    const float4 a = *(const float4*)(x + i), c = *(const float4*)(x + i + 4);
    uint4 w;
    w.x = fa_pack(a.x, a.y);
    w.y = fa_pack(a.z, a.w);
    w.z = fa_pack(c.x, c.y);
    w.w = fa_pack(c.z, c.w);
    *(uint4*)(y + i) = w;
    return;
  }
  for (long long j = i; j < i + 8 && j < FA_N; j += 2) *(unsigned*)(y + j) = fa_pack(x[j], x[j + 1]);
}
`

// fillSrc sets FA_N 32-bit words to FA_FILL: zeroed accumulators, lse = −Inf;
// four words a thread, one 16-byte store when y is 16-byte aligned.
const fillSrc = `extern "C" __global__ void __launch_bounds__(256) @KERNEL@(unsigned* __restrict__ y) {
  const long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 4;
  if (i >= FA_N) return;
  if (i + 4 <= FA_N && ((unsigned long long)y & 15) == 0) {
    uint4 w;
    w.x = w.y = w.z = w.w = FA_FILL;
    *(uint4*)(y + i) = w;
    return;
  }
  for (long long j = i; j < i + 4 && j < FA_N; ++j) y[j] = FA_FILL;
}
`
