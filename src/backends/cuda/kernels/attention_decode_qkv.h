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
#define QS (NW / G)                         // key chunks per query row (a warp each)
#define KPW ((KPC + QS - 1) / QS)             // at most keys per warp
#define KPL ((KPW + 31) / 32)
#define TAB_BYTES 512                       // the RoPE tables' row: cos, then sin (at most 64 TC each)
#ifdef QKV_PROBE
__device__ unsigned qkv_probe_count;
#endif
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

// At most 64 registers per thread below 32 warps, as gemv_packed: a block of 8 warps fits beside
// a 24-warp GEMV block (the previous product's, or the next one's launched early).
#if NW == 32
#define QKV_BOUNDS __launch_bounds__(1024, 1)
#else
#define QKV_BOUNDS __maxnreg__(64)
#endif
extern "C" __global__ void QKV_BOUNDS attn_decode_qkv(QkvArgs f, AttnArgs a, const char* __restrict__ pf,
                                                                long long pf_bytes) {
  extern __shared__ __align__(16) uint4 smem4[];
  unsigned char* sm = reinterpret_cast<unsigned char*>(smem4);
  float* sR = reinterpret_cast<float*>(sm + XS_BYTES);  // [NR] the cluster's columns
  float* sQ = sR + NR;                                  // [G][HD] q rotated, as T
  TC* sTab = reinterpret_cast<TC*>(sQ + G * HD);        // the RoPE tables' row: [2][TAB_BYTES / 2]
  T* sK = reinterpret_cast<T*>(sm + XS_BYTES + (NR + G * HD) * 4 + TAB_BYTES);  // [KPC][KST] this block's keys
  T* sV = sK + KPC * KST;
  float* inbox = reinterpret_cast<float*>(sV + KPC * KST);  // [C QS][EPC] the partials this block merges
  float* ml = inbox + C * QS * EPC;                          // [C QS][G][2] every warp's row max and sum
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#ifdef QKV_PROBE
  unsigned long long ts[9];
#define STAMP(i) if (tid == 0 && blockIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ts[i]));
#else
#define STAMP(i)
#endif
  STAMP(0)
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
  // The tables' row (position 0 of this decode step's tables: 16-byte pieces, host-checked) into
  // shared memory: before the wait when they are leaves, else right after it.
  const int tab_pieces = (int)(a.rope_rot / 2 * sizeof(TC) / 16);
#define QKV_TABLES()                                                                         \
  if (tid < 2 * tab_pieces) {                                                                \
    const char* src = reinterpret_cast<const char*>(tid < tab_pieces ? a.rope_cos : a.rope_sin); \
    const int piece = tid % tab_pieces;                                                      \
    cp_async16(smem_addr(sTab) + (tid < tab_pieces ? 0 : TAB_BYTES / 2) + piece * 16, src + piece * 16, true); \
  }                                                                                          \
  cp_async_commit();
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
  STAMP(1)
  rlx_pdl_begin();
  STAMP(2)
#if ROPE && !ROPE_STATIC
  QKV_TABLES();
#endif
  packed_stage_a(smem4, f.a, f.px, f.pg, f.pb, f.eps, KN, LDK);

  STAMP(3)
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
  STAMP(4)
  cp_async_wait<0>();
  cluster_sync_all();  // every column is in every block; this block's cached rows have landed

  STAMP(5)
  // q rotated (rounded to T, as the Rope step stores it), and the new K / V rows when this block
  // holds the new key.
  const long long knew = a.k_split;
  const bool own_new = knew >= k0 && knew < k1;
  for (int e = tid; e < (G + 1) * HD; e += NT) {
    const int r = e / HD, d = e % HD;
#if ROPE
    RopeIn o;
    const int p = rope_setup(a, d, o);
    o.c = to_f(sTab[p]), o.sn = to_f(sTab[TAB_BYTES / 2 / sizeof(TC) + p]);
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

  STAMP(6)
  // Warp w: query row w % G over the (w / G)-th of QS chunks of this block's keys (lane j: keys
  // j, j + 32, ... of the chunk): scores, softmax and P @ V (lane: dims lane + 32 e) in f32.
  const int row = warp % G, sub = warp / G;
  float m = RLX_NEG_INF, l = 0.f, o[DPL];
#pragma unroll
  for (int e = 0; e < DPL; ++e) o[e] = 0.f;
  if (sub < QS) {
    const int ck = (nk + QS - 1) / QS, j0 = min(nk, sub * ck), j1 = min(nk, j0 + ck);
    const float* qr = sQ + row * HD;
    float s[KPL];
    float mx = RLX_NEG_INF;
#pragma unroll
    for (int t = 0; t < KPL; ++t) {
      const int j = j0 + t * 32 + lane;
      s[t] = RLX_NEG_INF;
      if (j < j1) {
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
      for (int jj = 0; jj < 32 && j0 + t * 32 + jj < j1; ++jj) {
        const float p = __shfl_sync(0xffffffffu, s[t], jj);
        const T* vr = sV + (j0 + t * 32 + jj) * KST;
#pragma unroll
        for (int e = 0; e < DPL; ++e) o[e] = fmaf(p, to_f(vr[lane + 32 * e]), o[e]);
      }
    // Into the blocks that merge them: element el of the G x HD result goes to block el / EPC, as
    // partial rank * QS + sub of it.
    const int pi = (int)rank * QS + sub;
#pragma unroll
    for (int e = 0; e < DPL; ++e) {
      const int el = row * HD + lane + 32 * e, owner = el / EPC;
      st_cluster_f(inbox + pi * EPC + (el - owner * EPC), (unsigned)owner, o[e]);
    }
    if (lane < C) {
      st_cluster_f(ml + (pi * G + row) * 2, (unsigned)lane, m);
      st_cluster_f(ml + (pi * G + row) * 2 + 1, (unsigned)lane, l);
    }
  }
  STAMP(7)
  cluster_sync_all();
  STAMP(8)
  for (int e = tid; e < EPC; e += NT) {
    const int el = (int)rank * EPC + e;
    if (el >= G * HD) break;
    const int r = el / HD, d = el % HD;
    float mx = RLX_NEG_INF;
    for (int q = 0; q < C * QS; ++q) mx = fmaxf(mx, ml[(q * G + r) * 2]);
    float sum = 0.f, val = 0.f;
    for (int q = 0; q < C * QS; ++q) {
      const float c = split_weight(ml[(q * G + r) * 2], mx);
      sum += ml[(q * G + r) * 2 + 1] * c, val += inbox[q * EPC + e] * c;
    }
    reinterpret_cast<T*>(a.out)[(kvh * G + r) * a.os_h + d] = from_f<T>(val * split_inv_sum(sum));
  }
#ifdef QKV_PROBE
  if (tid == 0 && blockIdx.x == 0) {
    const unsigned n = atomicAdd(&qkv_probe_count, 1u);
    if (n >= 320 && n < 336)
      printf("probe %u: wait %llu stage %llu gemv %llu tables %llu rope %llu attn %llu barrier2 %llu (ns)\n", n,
             ts[2] - ts[1], ts[3] - ts[2], ts[4] - ts[3], ts[5] - ts[4], ts[6] - ts[5], ts[7] - ts[6], ts[8] - ts[7]);
  }
#endif
}
)CUDA";

}  // namespace rlx::cuda::ksrc
