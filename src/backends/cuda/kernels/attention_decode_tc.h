#pragma once
// Decode attention on the tensor cores for f16/bf16 when a (kv head, batch)'s whole K/V range fits
// in one block's shared memory: one block of NW warps per (kv head, batch), no key splits and so
// no merge between blocks.
//
// Before the programmatic-launch wait the block copies its cached K/V rows (when they are leaves:
// K_STATIC / V_STATIC) into shared memory with 16-byte cp.async, and reads the RoPE tables' part
// of the rotations when the tables are leaves (ROPE_STATIC). After it: the rows other kernels
// write, the new K rows (rotated on load with ROPE_K, NK of them) and V rows, and the R = q_len *
// group query rows of the head group (rotated with ROPE_Q) as one m16 tile (rows R..15 zero).
// Warp w takes the key chunks w, w + NW, ... of BN keys: S = Q K^T with mma.sync m16n8k16
// (ldmatrix of K), the score pipeline of attn_score (scale, softcap, masks, bias) on the
// accumulator fragments, an online softmax per row, P rounded to T and O += P V (ldmatrix.trans
// of V). The warps' (max, sum, O) are merged through shared memory with the split helpers of
// kAttentionCommon. Compiled per (T, M, TC, BF16, HD a multiple of 16 <= 128, R <= 16, NW, BN,
// MASK = AttnArgs::mask_kind (5: positions, read before the wait: the host takes it only from a leaf), SOFTCAP, K_STATIC, V_STATIC, ROPE_Q, ROPE_K, NK, ROPE_STATIC).
// Shared memory (host: decode_tc_smem): K and V [cap][HD + 8] of T (cap = kv_len rounded up to
// BN; rows past the keys are zero), Q [16][HD + 8], then [NW][R][HD] + 2 [NW][R] floats for the
// merge.
namespace rlx::cuda::ksrc {

inline constexpr const char* kAttentionDecodeTc = R"CUDA(
#ifndef ROPE_STATIC
#define ROPE_STATIC 0  // the RoPE tables are leaves: read before the wait
#endif
#define NT (NW * 32)
#define KST (HD + 8)  // shared-memory row stride in elements: ldmatrix rows hit distinct banks
#define NC (HD / 8)   // 16-byte pieces of a row
#define RH (R > 8 ? 2 : 1)  // accumulator row halves holding real rows (rows lane / 4 + 8 hf)

// Copies keys [k0, k1) (their rows k - first of `src`, strides sb / ss / sh) into shared rows
// k - lo of `dst`, 16 bytes per cp.async.
__device__ __forceinline__ void tc_copy_rows(unsigned dst, const T* src, long long sb, long long ss, long long sh,
                                             long long b, long long kvh, long long k0, long long k1, long long first,
                                             long long lo) {
  const long long cnt = max(0ll, k1 - k0) * NC;
  for (long long i = threadIdx.x; i < cnt; i += NT) {
    const long long key = k0 + i / NC;
    const int c = (int)(i % NC);
    cp_async16(dst + (unsigned)(((key - lo) * KST + c * 8) * 2), src + b * sb + (key - first) * ss + kvh * sh + c * 8, true);
  }
}

extern "C" __global__ void __launch_bounds__(NT, 512 / NT) attn_decode_tc(AttnArgs a) {  // <= 128 registers
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int cap = (int)((a.kv_len + BN - 1) / BN * BN);
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + (long long)cap * KST;
  T* sQ = sV + (long long)cap * KST;
  float* wacc = reinterpret_cast<float*>(sQ + 16 * KST);  // [NW][R][HD]
  float* wm = wacc + NW * R * HD;                         // [NW][R] each warp's row max
  float* wl = wm + NW * R;                                // [NW][R] each warp's row sum
  const unsigned uK = smem_addr(sK), uV = smem_addr(sV), uQ = smem_addr(sQ);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long b = blockIdx.z, kvh = blockIdx.y;
  const long long offset = a.kv_len - a.q_len;  // position of query row i is offset + i
  long long lo = 0, hi = a.kv_len;              // keys some row may see; key lo + i is shared row i
  if (MASK == 1 || MASK == 2) hi = min(hi, offset + a.q_len);
  if (MASK == 2) lo = max(lo, offset - a.window + 1);
#if MASK == 5
  {  // keys up to the largest position of the batch's rows (a leaf: read before the wait)
    long long top = -1;
    for (long long r = 0; r < a.q_len; ++r) top = max(top, (long long)a.mask[b * a.mask_batch + r]);
    hi = min(hi, top + 1);
  }
#endif
  const int n = hi > lo ? (int)(hi - lo) : 0;
  const long long kc_end = min(hi, a.k_split), vc_end = min(hi, a.v_split);  // the cached rows end
  const long long k2_begin = max(lo, a.k_split), v2_begin = max(lo, a.v_split);

  // Cached rows no kernel writes go out before the wait; the padding rows (up to the last chunk's
  // end) and Q's unused rows are zeroed meanwhile.
  if (K_STATIC) tc_copy_rows(uK, a.k, a.ks_b, a.ks_s, a.ks_h, b, kvh, lo, kc_end, 0, lo);
  if (V_STATIC) tc_copy_rows(uV, a.v, a.vs_b, a.vs_s, a.vs_h, b, kvh, lo, vc_end, 0, lo);
  cp_async_commit();
  const int nr = (n + BN - 1) / BN * BN;
  const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
  for (int i = tid; i < (nr - n) * NC; i += NT) {
    const int row = n + i / NC, c = i % NC;
    *reinterpret_cast<uint4*>(sK + row * KST + c * 8) = zero4;
    *reinterpret_cast<uint4*>(sV + row * KST + c * 8) = zero4;
  }
  for (int i = R * NC + tid; i < 16 * NC; i += NT)
    *reinterpret_cast<uint4*>(sQ + (i / NC) * KST + (i % NC) * 8) = zero4;
  // q rows (and with ROPE_K the NK new K rows): every load first, then the values and stores;
  // with ROPE_STATIC the RoPE tables' part before the wait.
#define QE ((R * HD + NT - 1) / NT)
#define KE ((NK * HD + NT - 1) / NT)
#if ROPE_Q
  RopeIn qin[QE];
#define Q_TABLES()                                                            \
  _Pragma("unroll") for (int j = 0; j < QE; ++j) {                            \
    const int i = min(j * NT + tid, R * HD - 1), r = i / HD;                  \
    qin[j] = rope_load_table(a, i % HD, b, r / a.group, a.q_len);            \
  }
#else
  float qv[QE];
#define Q_TABLES()
#endif
#if ROPE_K
  RopeIn kin[KE];
#define K_TABLES()                                                            \
  _Pragma("unroll") for (int j = 0; j < KE; ++j) {                            \
    const int i = min(j * NT + tid, NK * HD - 1);                             \
    kin[j] = rope_load_table(a, i % HD, b, i / HD, NK);                       \
  }
#else
#define K_TABLES()
#endif
  if (ROPE_STATIC) { Q_TABLES(); K_TABLES(); }
  rlx_pdl_begin();
  if (!ROPE_STATIC) { Q_TABLES(); K_TABLES(); }
  if (!K_STATIC) tc_copy_rows(uK, a.k, a.ks_b, a.ks_s, a.ks_h, b, kvh, lo, kc_end, 0, lo);
  if (!V_STATIC) tc_copy_rows(uV, a.v, a.vs_b, a.vs_s, a.vs_h, b, kvh, lo, vc_end, 0, lo);
#if !ROPE_K
  tc_copy_rows(uK, a.k2, a.k2s_b, a.k2s_s, a.k2s_h, b, kvh, k2_begin, hi, a.k_split, lo);
#endif
  tc_copy_rows(uV, a.v2, a.v2s_b, a.v2s_s, a.v2s_h, b, kvh, v2_begin, hi, a.v_split, lo);
  cp_async_commit();
#pragma unroll
  for (int j = 0; j < QE; ++j) {
    const int i = min(j * NT + tid, R * HD - 1), r = i / HD;
    const long long qi = r / a.group, h = kvh * a.group + r % a.group;
    const T* qrow = a.q + b * a.qs_b + qi * a.qs_s + h * a.qs_h;
#if ROPE_Q
    rope_load_row(qin[j], qrow);
#else
    qv[j] = ldg_f(qrow + i % HD);
#endif
  }
#if ROPE_K
#pragma unroll
  for (int j = 0; j < KE; ++j) {
    const int i = min(j * NT + tid, NK * HD - 1);
    rope_load_row(kin[j], a.k2 + b * a.k2s_b + (i / HD) * a.k2s_s + kvh * a.k2s_h);
  }
#pragma unroll
  for (int j = 0; j < KE; ++j) {
    const int i = j * NT + tid;
    const long long key = a.k_split + i / HD;
    if (i < NK * HD && key >= lo && key < hi) sK[(key - lo) * KST + i % HD] = from_f<T>(rope_value(kin[j]));
  }
#endif
#pragma unroll
  for (int j = 0; j < QE; ++j) {
    const int i = j * NT + tid;
#if ROPE_Q
    if (i < R * HD) sQ[(i / HD) * KST + i % HD] = from_f<T>(rope_value(qin[j]));
#else
    if (i < R * HD) sQ[(i / HD) * KST + i % HD] = from_f<T>(qv[j]);
#endif
  }
  cp_async_wait<0>();
  __syncthreads();

  // This lane's accumulator rows (lane / 4 + 8 hf) and the shared rows [klo, khi) each may see.
  int klo[2], khi[2];
  long long moff[2];  // MASK 3: the keep mask's batch row; MASK 4: the bias row
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = (lane >> 2) + 8 * hf;
    klo[hf] = khi[hf] = 0, moff[hf] = 0;
    if (r < R) {
      const long long qi = r / a.group, h = kvh * a.group + r % a.group, pos = offset + qi;
      long long l0 = lo, h0 = hi;
      if (MASK == 1 || MASK == 2) h0 = min(h0, pos + 1);
      if (MASK == 2) l0 = max(l0, pos - a.window + 1);
#if MASK == 5
      h0 = min(h0, (long long)a.mask[b * a.mask_batch + qi] + 1);
#endif
      klo[hf] = (int)(l0 - lo), khi[hf] = (int)max(l0 - lo, h0 - lo);
      moff[hf] = MASK == 4 ? b * a.bias_s[0] + h * a.bias_s[1] + qi * a.bias_s[2] : b * a.mask_batch;
    }
  }
  (void)moff;  // read with MASK 3 and 4 only
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;                              // A (16x16)
  const int k_row = (lane & 7) + ((lane >> 4) << 3), k_col = ((lane >> 3) & 1) * 8;  // K as B
  const int v_row = (lane & 7) + (((lane >> 3) & 1) << 3), v_col = (lane >> 4) * 8;  // V as B, transposed
  float m[2] = {RLX_NEG_INF, RLX_NEG_INF}, l[2] = {0.f, 0.f}, acc[HD / 8][4];
#pragma unroll
  for (int dn = 0; dn < HD / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dn][e] = 0.f;

  for (int c0 = warp * BN; c0 < n; c0 += NW * BN) {
    float s[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      unsigned qf[4];
      ldsm_x4(uQ + (a_row * KST + kk * 16 + a_col) * 2, qf[0], qf[1], qf[2], qf[3]);
#pragma unroll
      for (int nb = 0; nb < BN / 16; ++nb) {
        unsigned b0, b1, b2, b3;
        ldsm_x4(uK + ((c0 + nb * 16 + k_row) * KST + kk * 16 + k_col) * 2, b0, b1, b2, b3);
        mma16816(s[2 * nb], qf, b0, b1);
        mma16816(s[2 * nb + 1], qf, b2, b3);
      }
    }
    // Scores as attn_score computes them; -inf where masked, 0 in rows past R (unused).
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hf = e >> 1, key = c0 + j * 8 + (lane & 3) * 2 + (e & 1);
        if (hf >= RH) {
          s[j][e] = 0.f;
          continue;
        }
        float x = s[j][e] * a.scale;
#if SOFTCAP
        x = a.softcap * tanhf(x / a.softcap);
#endif
        bool keep = key >= klo[hf] && key < khi[hf];
#if MASK == 3
        keep = keep && to_f(a.mask[moff[hf] + lo + key]) != 0.f;
#elif MASK == 4
        if (keep) x += to_f(a.mask[moff[hf] + (lo + key) * a.bias_s[3]]);
#endif
        s[j][e] = keep ? x : RLX_NEG_INF;
      }
    // Online softmax per row: the four lanes of a quad share one.
#pragma unroll
    for (int hf = 0; hf < RH; ++hf) {
      float mx = m[hf];
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * hf], s[j][2 * hf + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = mx == RLX_NEG_INF ? 0.f : mx;
      const float corr = __expf(m[hf] - base);
      m[hf] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
          const float p = __expf(s[j][e] - base);
          s[j][e] = p;
          sum += p;
        }
      l[hf] = l[hf] * corr + sum;
#pragma unroll
      for (int dn = 0; dn < HD / 8; ++dn) acc[dn][2 * hf] *= corr, acc[dn][2 * hf + 1] *= corr;
    }
    // O += P V: the S fragments of keys [16 kb, 16 kb + 16) are the A operand.
#pragma unroll
    for (int kb = 0; kb < BN / 16; ++kb) {
      const unsigned pa[4] = {pack2(s[2 * kb][0], s[2 * kb][1]), pack2(s[2 * kb][2], s[2 * kb][3]),
                              pack2(s[2 * kb + 1][0], s[2 * kb + 1][1]), pack2(s[2 * kb + 1][2], s[2 * kb + 1][3])};
#pragma unroll
      for (int dn = 0; dn < HD / 16; ++dn) {
        unsigned b0, b1, b2, b3;
        ldsm_x4_t(uV + ((c0 + kb * 16 + v_row) * KST + dn * 16 + v_col) * 2, b0, b1, b2, b3);
        mma16816(acc[2 * dn], pa, b0, b1);
        mma16816(acc[2 * dn + 1], pa, b2, b3);
      }
    }
  }

  // Each warp's rows into shared memory (its sum over the quad), then one thread per result
  // element merges the NW warps.
#pragma unroll
  for (int hf = 0; hf < RH; ++hf) {
    float sum = l[hf];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = (lane >> 2) + 8 * hf;
    if (r < R) {
#pragma unroll
      for (int dn = 0; dn < HD / 8; ++dn) {
        float* p = wacc + (warp * R + r) * HD + dn * 8 + (lane & 3) * 2;
        p[0] = acc[dn][2 * hf], p[1] = acc[dn][2 * hf + 1];
      }
      if ((lane & 3) == 0) wm[warp * R + r] = m[hf], wl[warp * R + r] = sum;
    }
  }
  __syncthreads();
  for (int i = tid; i < R * HD; i += NT) {
    const int r = i / HD, d = i % HD;
    float mx = RLX_NEG_INF;
#pragma unroll
    for (int w = 0; w < NW; ++w) mx = fmaxf(mx, wm[w * R + r]);
    float sum = 0.f, val = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float c = split_weight(wm[w * R + r], mx);
      sum += wl[w * R + r] * c, val += wacc[(w * R + r) * HD + d] * c;
    }
    const long long qi = r / a.group, h = kvh * a.group + r % a.group;
    a.out[b * a.os_b + qi * a.os_s + h * a.os_h + d] = from_f<T>(val * split_inv_sum(sum));
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
