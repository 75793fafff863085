package flash

// fwdSrc is the forward: one CTA per (query tile of FA_BR rows, head, batch ×
// segment), FA_BR/16 warps of 16 query rows each. K and V tiles of FA_BC rows
// stream through FA_STAGES shared buffers with cp.async; S = Q·Kᵀ and O += P·V run
// on mma.sync with fp32 accumulators; the softmax is online in fp32 with exp2 and
// the scale folded into log2(e). Causal CTAs visit only the key tiles left of
// their diagonal and mask only the tiles that cross it (and a ragged last tile).
// Causal CTAs run longest first (the grid's last query tiles are launched first).
const fwdSrc = `extern "C" __global__ void __launch_bounds__(FA_NT) @KERNEL@(FA_OT* __restrict__ o, float* __restrict__ lse,
    const fa_bf16* __restrict__ q, const fa_bf16* __restrict__ k, const fa_bf16* __restrict__ v) {
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
  long long kend = kn;
  if (FA_CAUSAL) {
    const long long lim = FA_QPOS + q0 + FA_BR - FA_KPOS;
    if (lim < kend) kend = lim;
  }
  const int nkt = kend > 0 ? (int)((kend + FA_BC - 1) / FA_BC) : 0;
  const long long qrs = (long long)FA_HQ * FA_D * FA_R, krs = (long long)FA_HKV * FA_D * FA_R;
  const fa_bf16* qg = q + ((b * FA_T + qp0) * FA_HQ + h) * FA_D;
  const fa_bf16* kg = k + ((b * FA_S + kp0) * FA_HKV + hk) * FA_D;
  const fa_bf16* vg = v + ((b * FA_S + kp0) * FA_HKV + hk) * FA_D;
  fa_load_tile<FA_BR, FA_NT>(sQ, qg, qrs, q0, qn, tid);
#pragma unroll
  for (int s = 0; s < FA_STAGES - 1; ++s) {
    if (s < nkt) {
      fa_load_tile<FA_BC, FA_NT>(sK + s * FA_BC * FA_D, kg, krs, (long long)s * FA_BC, kn, tid);
      fa_load_tile<FA_BC, FA_NT>(sV + s * FA_BC * FA_D, vg, krs, (long long)s * FA_BC, kn, tid);
    }
    fa_commit();
  }
  const int g = lane >> 2, c2 = (lane & 3) * 2;
  const long long r0 = q0 + warp * 16 + g;
  unsigned qf[FA_D / 16][4];
  float acc[FA_D / 8][4];
#pragma unroll
  for (int i = 0; i < FA_D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m[2] = {-FA_INF, -FA_INF}, l[2] = {0.0f, 0.0f};
  for (int j = 0; j < nkt; ++j) {
    fa_wait<FA_STAGES - 2>();
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < FA_D / 16; ++kk)
        fa_ldm4(qf[kk], fa_smem(sQ + fa_swz(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 16 + (lane >> 4) * 8)));
    }
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
    float s[FA_BC / 8][4];
#pragma unroll
    for (int i = 0; i < FA_BC / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < FA_D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < FA_BC / 16; ++np) {
        unsigned bb[4];
        fa_ldm4(bb, fa_smem(cK + fa_swz(np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 16 + ((lane >> 3) & 1) * 8)));
        fa_mma(s[2 * np], qf[kk], bb[0], bb[1]);
        fa_mma(s[2 * np + 1], qf[kk], bb[2], bb[3]);
      }
    }
    const long long k0 = (long long)j * FA_BC;
    if (k0 + FA_BC > kn || (FA_CAUSAL && FA_KPOS + k0 + FA_BC - 1 > FA_QPOS + q0)) {
#pragma unroll
      for (int nt = 0; nt < FA_BC / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const long long col = k0 + nt * 8 + c2 + (e & 1), row = r0 + (e >> 1) * 8;
          if (col >= kn || (FA_CAUSAL && FA_KPOS + col > FA_QPOS + row)) s[nt][e] = -FA_INF;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int nt = 0; nt < FA_BC / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float ms = mx == -FA_INF ? 0.0f : mx * FA_SL2;
      const float corr = fa_exp2(m[r] * FA_SL2 - ms);
      m[r] = mx;
      float ls = 0.0f;
#pragma unroll
      for (int nt = 0; nt < FA_BC / 8; ++nt) {
        const float p0 = fa_exp2(fmaf(s[nt][2 * r], FA_SL2, -ms)), p1 = fa_exp2(fmaf(s[nt][2 * r + 1], FA_SL2, -ms));
        s[nt][2 * r] = p0;
        s[nt][2 * r + 1] = p1;
        ls += p0 + p1;
      }
      l[r] = l[r] * corr + ls;
#pragma unroll
      for (int dt = 0; dt < FA_D / 8; ++dt) {
        acc[dt][2 * r] *= corr;
        acc[dt][2 * r + 1] *= corr;
      }
    }
#pragma unroll
    for (int kk = 0; kk < FA_BC / 16; ++kk) {
      unsigned a[4];
      a[0] = fa_pack(s[2 * kk][0], s[2 * kk][1]);
      a[1] = fa_pack(s[2 * kk][2], s[2 * kk][3]);
      a[2] = fa_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = fa_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < FA_D / 16; ++dp) {
        unsigned bb[4];
        fa_ldm4t(bb, fa_smem(cV + fa_swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 16 + (lane >> 4) * 8)));
        fa_mma(acc[2 * dp], a, bb[0], bb[1]);
        fa_mma(acc[2 * dp + 1], a, bb[2], bb[3]);
      }
    }
  }
  fa_wait<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#if FA_ACC
  float la[2], lb[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = r0 + r * 8;
    lb[r] = l[r] > 0.0f ? m[r] * FA_SCALE + logf(l[r]) : -FA_INF;
    la[r] = row < qn ? lse[(b * FA_HQ + h) * FA_T + qp0 + row * FA_R] : -FA_INF;
  }
  __syncwarp();
#endif
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = r0 + r * 8;
    if (row >= qn) continue;
    const long long pos = qp0 + row * FA_R;
    FA_OT* orow = o + ((b * FA_T + pos) * FA_HQ + h) * FA_D;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#if FA_ACC
    if (lb[r] == -FA_INF) continue;
    const float mx = fmaxf(la[r], lb[r]);
    float wa = expf(la[r] - mx), wb = expf(lb[r] - mx);
    const float sum = wa + wb;
    wa /= sum;
    wb = wb / sum * inv;
#pragma unroll
    for (int dt = 0; dt < FA_D / 8; ++dt) {
      float2* p = (float2*)(orow + dt * 8 + c2);
      float2 x = *p;
      x.x = wa * x.x + wb * acc[dt][2 * r];
      x.y = wa * x.y + wb * acc[dt][2 * r + 1];
      *p = x;
    }
    if ((lane & 3) == 0) lse[(b * FA_HQ + h) * FA_T + pos] = mx + logf(sum);
#else
#pragma unroll
    for (int dt = 0; dt < FA_D / 8; ++dt)
      *(unsigned*)(orow + dt * 8 + c2) = fa_pack(acc[dt][2 * r] * inv, acc[dt][2 * r + 1] * inv);
    if ((lane & 3) == 0) lse[(b * FA_HQ + h) * FA_T + pos] = l[r] > 0.0f ? m[r] * FA_SCALE + logf(l[r]) : -FA_INF;
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
  const long long off = ((b * FA_T + t) * FA_HQ + h) * FA_D + lane * (FA_D / 32);
  const unsigned* op = (const unsigned*)(o + off);
  const unsigned* dp = (const unsigned*)(dout + off);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < FA_D / 64; ++i) {
    const unsigned a = op[i], c = dp[i];
    s += __uint_as_float(a << 16) * __uint_as_float(c << 16) + __uint_as_float(a & 0xffff0000u) * __uint_as_float(c & 0xffff0000u);
  }
#pragma unroll
  for (int x = 16; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
  if (lane == 0) delta[(b * FA_HQ + h) * FA_T + t] = s;
}
`

// convertSrc rounds an fp32 buffer (a dilated or ring accumulator) to bf16.
const convertSrc = `extern "C" __global__ void __launch_bounds__(256) @KERNEL@(fa_bf16* __restrict__ y, const float* __restrict__ x) {
  const long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 2;
  if (i >= FA_N) return;
  *(unsigned*)(y + i) = fa_pack(x[i], x[i + 1]);
}
`
