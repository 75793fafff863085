package flash

// fwd90Src is tier 2's forward (sm_90a): the tier-1 forward's algorithm and
// geometry (one CTA per query tile, head, batch × segment; causal CTAs longest
// first; online softmax in fp32 with exp2), with both products on wgmma. Each
// of the FA_BR/64 warpgroups owns 64 query rows. S = Q·Kᵀ reads Q and K from
// shared memory (fa_wg_s); O += P·V takes P from registers, where S's
// accumulators already sit in the A fragment's layout, and V from shared memory
// read MN-major (fa_wg_o). K and V tiles stream through FA_STAGES buffers with
// cp.async, fenced to the async proxy before wgmma reads them. P·V runs on
// while the next iteration syncs, queues its loads and starts its S.
const fwd90Src = `extern "C" __global__ void __launch_bounds__(FA_NT, 1) @KERNEL@(FA_OT* __restrict__ o, float* __restrict__ lse,
    const fa_bf16* __restrict__ q, const fa_bf16* __restrict__ k, const fa_bf16* __restrict__ v FA_DOCS_ARG) {
  extern __shared__ __align__(1024) unsigned char fa_sh[];
  fa_bf16* sQ = (fa_bf16*)fa_sh;
  fa_bf16* sK = sQ + FA_BR * FA_D;
  fa_bf16* sV = sK + FA_STAGES * FA_BC * FA_D;
  if (fa_smem(fa_sh) & 1023) __trap();  // the swizzle atoms need 1024-byte alignment
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  // Heads vary fastest in the launch order (fa_tile_order), so that every
  // head's longest tiles run in the first wave, not one head's after another's.
  int bx, h;
  fa_tile_order(&bx, &h);
  const int hk = h / FA_G;
  const long long b = blockIdx.z / FA_NSEG, sg = blockIdx.z % FA_NSEG;
  long long qp0, qn, kp0, kn;
  fa_geom(sg, h, FA_T, &qp0, &qn);
  fa_geom(sg, h, FA_S, &kp0, &kn);
  const long long tile = FA_CAUSAL ? (long long)(gridDim.x - 1 - bx) : (long long)bx;
  const long long q0 = tile * FA_BR;
  if (q0 >= qn) return;
  const long long* dsr = FA_DSR(b);
  int j0, nkt;
  fa_keys(q0, kn, dsr, &j0, &nkt);
  const long long qrs = FA_QRS * FA_R, krs = FA_KRS * FA_R, vrs = FA_VRS * FA_R;
  const fa_bf16* qg = q + FA_AT(Q, b, qp0, h);
  const fa_bf16* kg = k + FA_AT(K, b, kp0, hk);
  const fa_bf16* vg = v + FA_AT(V, b, kp0, hk);
  fa_load_tile90<FA_BR, FA_NT>(sQ, qg, qrs, q0, qn, tid);
  // Tiles run FA_STAGES − 2 ahead: P·V of tile j is still reading its stage
  // while tile j + 1's S is computed, so the loads issued then must not land in
  // it.
#pragma unroll
  for (int s = 0; s < FA_STAGES - 2; ++s) {
    const int js = j0 + s;
    if (js < nkt) {
      const int st = js % FA_STAGES;
      fa_load_tile90<FA_BC, FA_NT>(sK + st * FA_BC * FA_D, kg, krs, (long long)js * FA_BC, kn, tid);
      fa_load_tile90<FA_BC, FA_NT>(sV + st * FA_BC * FA_D, vg, vrs, (long long)js * FA_BC, kn, tid);
    }
    fa_commit();
  }
  const int g = lane >> 2, c2 = (lane & 3) * 2;
  // Warp w of warpgroup wg owns rows q0 + wg·64 + (w mod 4)·16 + g (+8).
  const int wr = wg * 64 + (warp & 3) * 16;
  const long long r0 = q0 + wr + g;
  // ds0[r] is the first visible key of this thread's row r0 + 8r, and dmax the
  // larger: key tiles at or past it need no document or window mask.
  long long ds0[2] = {0, 0}, dmax = 0;
#if FA_LEFT
#pragma unroll
  for (int r = 0; r < 2; ++r) ds0[r] = r0 + r * 8 < qn ? fa_start(dsr, r0 + r * 8) : 0;
  dmax = ds0[0] > ds0[1] ? ds0[0] : ds0[1];
#endif
  const unsigned qa = fa_smem(sQ) + wg * 64 * 128;
  float acc[FA_D / 2];
#pragma unroll
  for (int i = 0; i < FA_D / 2; ++i) acc[i] = 0.0f;
  float m[2] = {-FA_INF, -FA_INF}, l[2] = {0.0f, 0.0f};
  for (int j = j0; j < nkt; ++j) {
    fa_wait<FA_STAGES - 3>();
    fa_fence_async();
    __syncthreads();
    {
      const int jn = j + FA_STAGES - 2;
      if (jn < nkt) {
        const int st = jn % FA_STAGES;
        fa_load_tile90<FA_BC, FA_NT>(sK + st * FA_BC * FA_D, kg, krs, (long long)jn * FA_BC, kn, tid);
        fa_load_tile90<FA_BC, FA_NT>(sV + st * FA_BC * FA_D, vg, vrs, (long long)jn * FA_BC, kn, tid);
      }
      fa_commit();
    }
    const unsigned ka = fa_smem(sK + (j % FA_STAGES) * FA_BC * FA_D);
    const unsigned va = fa_smem(sV + (j % FA_STAGES) * FA_BC * FA_D);
    float s[FA_BC / 2];
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < FA_D / 16; ++kk)
      fa_wg_s(s, fa_desc(qa + (kk >> 2) * FA_BR * 128 + (kk & 3) * 32, 16, 1024),
              fa_desc(ka + (kk >> 2) * FA_BC * 128 + (kk & 3) * 32, 16, 1024), kk > 0);
    fa_wg_commit();
    fa_wg_wait<0>();  // S, and the previous tile's P·V (acc is rescaled next)
    const long long k0 = (long long)j * FA_BC;
    if (fa_keys_masked(k0, kn, q0 + wr, dmax)) {
#pragma unroll
      for (int nt = 0; nt < FA_BC / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const long long col = k0 + nt * 8 + c2 + (e & 1), row = r0 + (e >> 1) * 8;
          if (fa_hidden(row, col, kn, ds0[e >> 1]))
            s[nt * 4 + e] = -FA_INF;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int nt = 0; nt < FA_BC / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float ms = mx == -FA_INF ? 0.0f : mx * FA_SL2;
      const float corr = fa_exp2(m[r] * FA_SL2 - ms);
      m[r] = mx;
      float ls = 0.0f;
#pragma unroll
      for (int nt = 0; nt < FA_BC / 8; ++nt) {
        const float p0 = fa_exp2(fmaf(s[nt * 4 + 2 * r], FA_SL2, -ms)), p1 = fa_exp2(fmaf(s[nt * 4 + 2 * r + 1], FA_SL2, -ms));
        s[nt * 4 + 2 * r] = p0;
        s[nt * 4 + 2 * r + 1] = p1;
        ls += p0 + p1;
      }
      l[r] = l[r] * corr + ls;
#pragma unroll
      for (int dt = 0; dt < FA_D / 8; ++dt) {
        acc[dt * 4 + 2 * r] *= corr;
        acc[dt * 4 + 2 * r + 1] *= corr;
      }
    }
    unsigned p[FA_BC / 16][4];
#pragma unroll
    for (int kk = 0; kk < FA_BC / 16; ++kk) {
      p[kk][0] = fa_pack(s[8 * kk + 0], s[8 * kk + 1]);
      p[kk][1] = fa_pack(s[8 * kk + 2], s[8 * kk + 3]);
      p[kk][2] = fa_pack(s[8 * kk + 4], s[8 * kk + 5]);
      p[kk][3] = fa_pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < FA_BC / 16; ++kk)
      fa_wg_o(acc, p[kk], fa_desc(va + kk * 2048, FA_BC * 128, 1024), 1);
    fa_wg_commit();
  }
  fa_wg_wait<0>();
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
    FA_OT* orow = o + ((b * FA_T + pos) * FA_HQ + h) * FA_DG;
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
      if (dt * 8 >= FA_DG) break;  // a padded head dim's zero columns
      float2* pp = (float2*)(orow + dt * 8 + c2);
      float2 x = *pp;
      x.x = wa * x.x + wb * acc[dt * 4 + 2 * r];
      x.y = wa * x.y + wb * acc[dt * 4 + 2 * r + 1];
      *pp = x;
    }
    if ((lane & 3) == 0) lse[(b * FA_HQ + h) * FA_T + pos] = mx + logf(sum);
#else
#pragma unroll
    for (int dt = 0; dt < FA_D / 8; ++dt)
      if (dt * 8 < FA_DG) *(unsigned*)(orow + dt * 8 + c2) = fa_pack(acc[dt * 4 + 2 * r] * inv, acc[dt * 4 + 2 * r + 1] * inv);
    if ((lane & 3) == 0) lse[(b * FA_HQ + h) * FA_T + pos] = l[r] > 0.0f ? m[r] * FA_SCALE + logf(l[r]) : -FA_INF;
#endif
  }
}
`
