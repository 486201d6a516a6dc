#pragma once
// Decode (one query row, batch 1) as one kernel from the QKV product to the attention's result:
// the packed GEMV of the q / k / v columns, the RoPE of q and of the new K row, and the attention
// over the KV cache and the new row, so that q and the new rows never go through global memory
// and the boundary between the product and the attention disappears.
//
// One thread-block cluster of C blocks per KV head (grid.x = C * kv_heads). The cluster's NR =
// (G + 2) * HD product columns (its G query heads, the new K row, the new V row; column c of
// head h element d is col_q + h q_h + d, likewise col_k / col_v) go round-robin to its blocks'
// warps, each warp streaming whole rows of the packed weight as gemv_packed does (the first words
// before the programmatic-launch wait; A staged by packed_stage_a, with the RmsNorm prologue when
// the variant absorbed it). Each finished column (rounded to T, as the product would store it)
// is pushed into every block of the cluster (distributed shared memory), so after one cluster
// barrier every block holds q, k and v of its head. Each block then takes its share of the keys
// ([k0, k1): a C-th of the visible range, its cached rows copied into shared memory before the
// wait), rotates q (and the new K row when it holds that key), and computes the G rows' scores
// (a warp per row, a lane per key), softmax and P @ V in f32. The blocks' partials (max, sum,
// row) merge through distributed shared memory after one more cluster barrier; block r writes the
// result elements [r EPC, (r + 1) EPC).
//
// Compiled per (T, B = bias type, TC = RoPE table type, HD in {32, 64, 96, 128}, G <= NW query
// heads per KV head, C blocks per cluster, NW warps (NT threads), KPC >= keys per block, KN / LDK =
// the product's K and padded K, VW, PRO 0 / 1, HAS_PB, G_STATIC, HAS_BIAS, BIAS_SCALAR, EVF, MASK
// 0 / 1 / 2, SOFTCAP, ROPE, ROPE_STATIC). VEC_A (A read in 16-byte words) is required. Shared
// memory (host: decode_qkv_smem): A and the gain [XS_BYTES], the columns [NR] f32, q [G][HD]
// f32, K and V [KPC][KST] of T, the merge inbox [C][EPC] f32 and [C][G][2] f32.
namespace rlx::cuda::ksrc {

inline constexpr const char* kAttentionDecodeQkv = R"CUDA(
#define U 8
#define NR ((G + 2) * HD)
#define EPC ((G * HD + C - 1) / C)
#define DPL (HD / 32)
#define KPL ((KPC + 31) / 32)
#define RE (((G + 1) * HD + NT - 1) / NT)
struct QkvArgs {
  const T* a; const T* w; const B* bias; const T* px; const T* pg; const T* pb; float eps;
  long long col_q, col_k, col_v, q_h, k_h, v_h;
};

// The product column of the cluster's column i (q heads, then the new K row, then the new V row).
__device__ __forceinline__ long long qkv_column(const QkvArgs& f, long long kvh, int i) {
  if (i < G * HD) return f.col_q + (kvh * G + i / HD) * f.q_h + i % HD;
  if (i < (G + 1) * HD) return f.col_k + kvh * f.k_h + (i - G * HD);
  return f.col_v + kvh * f.v_h + (i - (G + 1) * HD);
}

extern "C" __global__ void __launch_bounds__(NT, 1) attn_decode_qkv(QkvArgs f, AttnArgs a, const char* __restrict__ pf,
                                                                long long pf_bytes) {
  extern __shared__ __align__(16) uint4 smem4[];
  unsigned char* sm = reinterpret_cast<unsigned char*>(smem4);
  float* sR = reinterpret_cast<float*>(sm + XS_BYTES);  // [NR] the cluster's columns
  float* sQ = sR + NR;                                  // [G][HD] q rotated, as T
  T* sK = reinterpret_cast<T*>(sQ + G * HD);            // [KPC][KST] this block's keys
  T* sV = sK + KPC * KST;
  float* inbox = reinterpret_cast<float*>(sV + KPC * KST);  // [C][EPC] the partials this block merges
  float* ml = inbox + C * EPC;                              // [C][G][2] every block's row max and sum
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned rank = cluster_rank();
  const long long kvh = blockIdx.x / C;
  const long long pos = a.kv_len - 1;  // the query row's position
  long long lo = 0;
  if (MASK == 2) lo = max(lo, pos - a.window + 1);
  const int n = (int)(a.kv_len - lo);  // visible keys: [lo, kv_len)
  const int per = (n + C - 1) / C;
  const long long k0 = lo + min(n, (int)rank * per), k1 = lo + min(n, ((int)rank + 1) * per);
  const int nk = (int)(k1 - k0);

  // This warp's first column's words, then the cached rows of this block's keys, before the wait.
  const long long kv = LDK / VW;
  const uint4* w4 = reinterpret_cast<const uint4*>(f.w);
  int col = (int)rank + C * warp;
  long long q0 = 0, wrow = col < NR ? qkv_column(f, kvh, col) : 0;
  bool have = col < NR;
  uint4 wr[U];
  const unsigned long long wpol = rlx_weight_policy(EVF);
#define QKV_LOAD_BATCH()                                                      \
  _Pragma("unroll") for (int j = 0; j < U; ++j) {                             \
    const long long q = q0 + j * 32 + lane;                                   \
    if (q < kv) wr[j] = rlx_ld_weight(w4 + wrow * kv + q, wpol, EVF);         \
  }
  if (have) { QKV_LOAD_BATCH(); }
  tc_copy_rows(smem_addr(sK), reinterpret_cast<const T*>(a.k), a.ks_b, a.ks_s, a.ks_h, 0, kvh, k0, min(k1, a.k_split), 0, k0);
  tc_copy_rows(smem_addr(sV), reinterpret_cast<const T*>(a.v), a.vs_b, a.vs_s, a.vs_h, 0, kvh, k0, min(k1, a.v_split), 0, k0);
  cp_async_commit();
#if PRO == 1 && G_STATIC
  packed_stage_gain(reinterpret_cast<T*>(smem4), f.pg, f.pb, KN, LDK);
#endif
#if ROPE
  RopeIn rin[RE];
#define QKV_TABLES()                                                          \
  _Pragma("unroll") for (int j = 0; j < RE; ++j) {                            \
    const int e = min(j * NT + tid, (G + 1) * HD - 1);                        \
    rin[j] = rope_load_table(a, e % HD, 0, 0, 1);                             \
  }
#if ROPE_STATIC
  QKV_TABLES();
#endif
#endif
  // The next product's weight into L2 (the weight stream), from the last warp of each block.
  if (pf_bytes > 0 && warp == NW - 1) {
    const long long share = ((pf_bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
    const long long p1 = min(pf_bytes, share * (blockIdx.x + 1));
    for (long long o = share * blockIdx.x + 32768ll * lane; o < p1; o += 32768ll * 32)
      rlx_prefetch_l2(pf + o, (unsigned)min(32768ll, p1 - o));
  }
  rlx_pdl_begin();
#if ROPE && !ROPE_STATIC
  QKV_TABLES();
#endif
  packed_stage_a(smem4, f.a, f.px, f.pg, f.pb, f.eps, KN, LDK);

  // The product: each finished column goes to every block of the cluster (lane r to block r).
  float acc = 0.f;
  while (have) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const long long q = q0 + j * 32 + lane;
      if (q < kv) {
        const Vec<T, VW> wv = *reinterpret_cast<const Vec<T, VW>*>(&wr[j]);
        const Vec<T, VW> xv = *reinterpret_cast<const Vec<T, VW>*>(&smem4[q]);
#pragma unroll
        for (int v = 0; v < VW; ++v) acc = fmaf(to_f(wv.v[v]), to_f(xv.v[v]), acc);
      }
    }
    const int cur = col;
    const long long cur_row = wrow;
    q0 += U * 32;
    const bool done = q0 >= kv;
    if (done) {
      col += C * NW, q0 = 0;
      if (col < NR) wrow = qkv_column(f, kvh, col);
    }
    have = col < NR;
    if (have) { QKV_LOAD_BATCH(); }
    if (done) {
      float v = warp_sum(acc);
      if (HAS_BIAS) v += to_f(f.bias[BIAS_SCALAR ? 0 : cur_row]);
      v = to_f(from_f<T>(v));
      if (lane < C) st_cluster_f(sR + cur, (unsigned)lane, v);
      acc = 0.f;
    }
  }
  cp_async_wait<0>();
  cluster_sync_all();  // every column is in every block; this block's cached rows have landed

  // q rotated (rounded to T, as the Rope step stores it), and the new K / V rows when this block
  // holds the new key.
  const long long knew = a.k_split;
  const bool own_new = knew >= k0 && knew < k1;
#pragma unroll
  for (int j = 0; j < RE; ++j) {
    const int e = j * NT + tid;
    if (e >= (G + 1) * HD) break;
    const int r = e / HD, d = e % HD;
#if ROPE
    RopeIn o = rin[j];
    o.x1 = sR[r * HD + o.i1], o.x2 = sR[r * HD + o.i2];
    const float val = rope_value(o);
#else
    const float val = sR[e];
#endif
    if (r < G) sQ[e] = val;
    else if (own_new) sK[(knew - k0) * KST + d] = from_f<T>(val);
  }
  if (own_new)
    for (int d = tid; d < HD; d += NT) sV[(knew - k0) * KST + d] = from_f<T>(sR[(G + 1) * HD + d]);
  __syncthreads();

  // Warp r: query row r's scores (lane j: keys j, j + 32, ...), softmax and P @ V (lane: dims
  // lane + 32 e).
  float m = RLX_NEG_INF, l = 0.f, o[DPL];
#pragma unroll
  for (int e = 0; e < DPL; ++e) o[e] = 0.f;
  if (warp < G) {
    const float* qr = sQ + warp * HD;
    float s[KPL];
    float mx = RLX_NEG_INF;
#pragma unroll
    for (int t = 0; t < KPL; ++t) {
      const int j = t * 32 + lane;
      s[t] = RLX_NEG_INF;
      if (j < nk) {
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < HD / 8; ++c) {
          const Vec<T, 8> kw = *reinterpret_cast<const Vec<T, 8>*>(sK + j * KST + c * 8);
#pragma unroll
          for (int e = 0; e < 8; ++e) dot = fmaf(qr[c * 8 + e], to_f(kw.v[e]), dot);
        }
        float x = dot * a.scale;
#if SOFTCAP
        x = a.softcap * tanhf(x / a.softcap);
#endif
        s[t] = x;
      }
      mx = fmaxf(mx, s[t]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float base = mx == RLX_NEG_INF ? 0.f : mx;
    float sum = 0.f;
#pragma unroll
    for (int t = 0; t < KPL; ++t) {
      s[t] = __expf(s[t] - base);
      sum += s[t];
    }
    m = mx, l = warp_sum(sum);
#pragma unroll
    for (int t = 0; t < KPL; ++t)
      for (int jj = 0; jj < 32 && t * 32 + jj < nk; ++jj) {
        const float p = __shfl_sync(0xffffffffu, s[t], jj);
        const T* vr = sV + (t * 32 + jj) * KST;
#pragma unroll
        for (int e = 0; e < DPL; ++e) o[e] = fmaf(p, to_f(vr[lane + 32 * e]), o[e]);
      }
    // Into the blocks that merge them: element el of the G x HD result goes to block el / EPC.
#pragma unroll
    for (int e = 0; e < DPL; ++e) {
      const int el = warp * HD + lane + 32 * e, owner = el / EPC;
      st_cluster_f(inbox + rank * EPC + (el - owner * EPC), (unsigned)owner, o[e]);
    }
    if (lane < C) {
      st_cluster_f(ml + (rank * G + warp) * 2, (unsigned)lane, m);
      st_cluster_f(ml + (rank * G + warp) * 2 + 1, (unsigned)lane, l);
    }
  }
  cluster_sync_all();
  for (int e = tid; e < EPC; e += NT) {
    const int el = (int)rank * EPC + e;
    if (el >= G * HD) break;
    const int r = el / HD, d = el % HD;
    float mx = RLX_NEG_INF;
#pragma unroll
    for (int q = 0; q < C; ++q) mx = fmaxf(mx, ml[(q * G + r) * 2]);
    float sum = 0.f, val = 0.f;
#pragma unroll
    for (int q = 0; q < C; ++q) {
      const float c = split_weight(ml[(q * G + r) * 2], mx);
      sum += ml[(q * G + r) * 2 + 1] * c, val += inbox[q * EPC + e] * c;
    }
    reinterpret_cast<T*>(a.out)[(kvh * G + r) * a.os_h + d] = from_f<T>(val * split_inv_sum(sum));
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
