#pragma once
// Flash-style attention (online softmax, K/V tiles in shared memory, f32 accumulation).
// Compiled per (T = q/k/v/out storage type, M = mask/bias type, HD = head_dim, a multiple of 4).
//
// Grid: x = query blocks of QB rows, y = batch * num_heads, z = KV splits. Each warp owns
// RPW query rows; lane l scores key (tile + l) against all of the warp's rows, then the lanes
// split the head dims to accumulate P @ V. With splits > 1 (decode: few query rows, long KV)
// every split writes its partial (max, sum, acc) to `part` and attn_combine merges them.
// Score pipeline (as the CPU oracle): s = q.k * scale; softcap; + bias; masks; softmax.
namespace rlx::cuda::ksrc {

// AttnArgs and the score pipeline, shared by the prefill and decode kernels.
inline constexpr const char* kAttentionCommon = R"CUDA(
struct AttnArgs {
  const T* q; const T* k; const T* v; T* out; const M* mask; float* part;
  long long qs_b, qs_s, qs_h, ks_b, ks_s, ks_h, vs_b, vs_s, vs_h, os_b, os_s, os_h;
  long long batch, q_len, kv_len, heads, group;
  float scale, softcap;
  int mask_kind;  // 0 none, 1 causal, 2 sliding window, 3 custom (keep), 4 bias
  long long window, mask_batch;
  long long bias_s[4];
  long long split_len;  // keys per split
  // attn_decode only: keys from k_split on are read from k2 (strides k2s_*), likewise V from
  // v_split (a KV cache and its new rows read in place instead of concatenated).
  const T* k2; const T* v2;
  long long k2s_b, k2s_s, k2s_h, v2s_b, v2s_s, v2s_h, k_split, v_split;
  // attn_decode with splits: one zeroed counter per (batch, kv head); the last split block to
  // finish merges the group's partials (no combine launch).
  unsigned* tickets;
  // attn_decode with ROPE_Q / ROPE_K: q and the new K rows (from k_split on) are read before
  // their RoPE and rotated on load (tables [rows][rope_rot / 2] of type TC, row per position,
  // or per (batch, position) with rope_per_batch; q's rope has q_len positions, the K rows' NK).
  const void* rope_cos; const void* rope_sin;
  long long rope_rot;
  int rope_per_batch, rope_neox;
};

// The score of query row `row` (head h, batch b) against key `key` from its dot product, as the
// CPU oracle computes it: s = q.k * scale; softcap; + bias; masks. -inf when masked or outside
// [lo, hi).
__device__ __forceinline__ float attn_score(const AttnArgs& a, float dot, long long b, long long h, long long row,
                                            long long key, long long lo, long long hi) {
  const long long pos = a.kv_len - a.q_len + row;
  float x = dot * a.scale;
  if (a.softcap > 0.f) x = a.softcap * tanhf(x / a.softcap);
  bool keep = key >= lo && key < hi && row < a.q_len;
  if (a.mask_kind == 1) keep = keep && key <= pos;
  else if (a.mask_kind == 2) keep = keep && key <= pos && key > pos - a.window;
  else if (a.mask_kind == 3) keep = keep && to_f(a.mask[b * a.mask_batch + key]) != 0.f;
  else if (a.mask_kind == 4 && keep)
    x += to_f(a.mask[b * a.bias_s[0] + h * a.bias_s[1] + row * a.bias_s[2] + key * a.bias_s[3]]);
  return keep ? x : RLX_NEG_INF;
}
)CUDA";

inline constexpr const char* kAttention = R"CUDA(
#define QB 16
#define RPW 4
#define KT 32
#define DE ((HD + 31) / 32)
#define KS (HD + 4)

extern "C" __global__ void __launch_bounds__(128) attention(AttnArgs a) {
  rlx_pdl_begin();
  extern __shared__ float smem[];
  float* sQ = smem;                  // QB x HD
  float* sK = sQ + QB * HD;          // KT x KS (rows padded by 4 floats: conflict-free float4 reads)
  float* sV = sK + KT * KS;          // KT x HD
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long bh = blockIdx.y, b = bh / a.heads, h = bh % a.heads, kvh = h / a.group;
  const long long q0 = (long long)blockIdx.x * QB;
  const long long offset = a.kv_len - a.q_len;  // position of query row i is offset + i

  for (int idx = threadIdx.x; idx < QB * HD; idx += blockDim.x) {
    const long long r = q0 + idx / HD;
    sQ[idx] = r < a.q_len ? to_f(a.q[b * a.qs_b + r * a.qs_s + h * a.qs_h + idx % HD]) : 0.f;
  }
  // Keys this block may need: [lo, hi) within this split.
  long long lo = (long long)blockIdx.z * a.split_len;
  long long hi = min(a.kv_len, lo + a.split_len);
  if (a.mask_kind == 1 || a.mask_kind == 2) hi = min(hi, offset + min(q0 + QB, a.q_len));
  if (a.mask_kind == 2) lo = max(lo, offset + q0 - a.window + 1);

  float m[RPW], l[RPW], acc[RPW][DE];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    m[r] = RLX_NEG_INF; l[r] = 0.f;
#pragma unroll
    for (int e = 0; e < DE; ++e) acc[r][e] = 0.f;
  }
  const long long row0 = q0 + warp * RPW;
  for (long long t0 = lo < 0 ? 0 : (lo / KT) * KT; t0 < hi; t0 += KT) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < KT * HD; idx += blockDim.x) {
      const int j = idx / HD, d = idx % HD;
      const long long key = t0 + j;
      float kv = 0.f, vv = 0.f;
      if (key < a.kv_len) {
        kv = to_f(a.k[b * a.ks_b + key * a.ks_s + kvh * a.ks_h + d]);
        vv = to_f(a.v[b * a.vs_b + key * a.vs_s + kvh * a.vs_h + d]);
      }
      sK[j * KS + d] = kv;
      sV[j * HD + d] = vv;
    }
    __syncthreads();
    if (row0 >= a.q_len) continue;
    const long long key = t0 + lane;
    float s[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) s[r] = 0.f;
#pragma unroll 4
    for (int d = 0; d < HD; d += 4) {
      const float4 kd = *(const float4*)&sK[lane * KS + d];
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        const float4 qd = *(const float4*)&sQ[(warp * RPW + r) * HD + d];
        s[r] += qd.x * kd.x + qd.y * kd.y + qd.z * kd.z + qd.w * kd.w;
      }
    }
    float p[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const float x = attn_score(a, s[r], b, h, row0 + r, key, lo, hi);
      const float mt = warp_max(x);
      const float mn = fmaxf(m[r], mt);
      const float pv = mn == RLX_NEG_INF ? 0.f : expf(x - mn);
      const float corr = mn == RLX_NEG_INF ? 1.f : expf(m[r] - mn);
      l[r] = l[r] * corr + warp_sum(pv);
      m[r] = mn;
#pragma unroll
      for (int e = 0; e < DE; ++e) acc[r][e] *= corr;
      p[r] = pv;
    }
    const int kmax = (int)min((long long)KT, hi - t0);
    for (int j = 0; j < kmax; ++j) {
      float vv[DE];
#pragma unroll
      for (int e = 0; e < DE; ++e) vv[e] = (lane + 32 * e < HD) ? sV[j * HD + lane + 32 * e] : 0.f;
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        const float pj = __shfl_sync(0xffffffffu, p[r], j);
#pragma unroll
        for (int e = 0; e < DE; ++e) acc[r][e] += pj * vv[e];
      }
    }
  }
  if (row0 >= a.q_len) return;
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const long long row = row0 + r;
    if (row >= a.q_len) break;
    if (a.part) {  // partial result of this split: [split][b][h][row] x (HD + 2)
      float* pp = a.part + ((((long long)blockIdx.z * a.batch + b) * a.heads + h) * a.q_len + row) * (HD + 2);
#pragma unroll
      for (int e = 0; e < DE; ++e)
        if (lane + 32 * e < HD) pp[lane + 32 * e] = acc[r][e];
      if (lane == 0) { pp[HD] = m[r]; pp[HD + 1] = l[r]; }
    } else {
      T* o = a.out + b * a.os_b + row * a.os_s + h * a.os_h;
      const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
#pragma unroll
      for (int e = 0; e < DE; ++e)
        if (lane + 32 * e < HD) o[lane + 32 * e] = from_f<T>(acc[r][e] * inv);
    }
  }
}
)CUDA";

// Merges the splits' partial results (layout [split][b][h][row] x (HD + 2): acc, max, sum).
inline constexpr const char* kAttentionCombine = R"CUDA(
#ifndef DE
#define DE ((HD + 31) / 32)
#endif
// Merges the splits' partial results: one warp per (b, h, row).
extern "C" __global__ void attn_combine(AttnArgs a, int splits) {
  rlx_pdl_begin();
  const long long rows = a.batch * a.heads * a.q_len;
  const int lane = threadIdx.x & 31;
  for (long long w = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5; w < rows;
       w += ((long long)gridDim.x * blockDim.x) >> 5) {
    const long long row = w % a.q_len, bh = w / a.q_len, h = bh % a.heads, b = bh / a.heads;
    float mx = RLX_NEG_INF;
    for (int sp = 0; sp < splits; ++sp) mx = fmaxf(mx, a.part[((long long)sp * rows + w) * (HD + 2) + HD]);
    float l = 0.f, acc[DE];
#pragma unroll
    for (int e = 0; e < DE; ++e) acc[e] = 0.f;
    if (mx != RLX_NEG_INF) {
      for (int sp = 0; sp < splits; ++sp) {
        const float* pp = a.part + ((long long)sp * rows + w) * (HD + 2);
        const float c = pp[HD] == RLX_NEG_INF ? 0.f : expf(pp[HD] - mx);
        l += pp[HD + 1] * c;
#pragma unroll
        for (int e = 0; e < DE; ++e)
          if (lane + 32 * e < HD) acc[e] += pp[lane + 32 * e] * c;
      }
    }
    T* o = a.out + b * a.os_b + row * a.os_s + h * a.os_h;
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int e = 0; e < DE; ++e)
      if (lane + 32 * e < HD) o[lane + 32 * e] = from_f<T>(acc[e] * inv);
  }
}
)CUDA";

// Decode attention: few query rows per KV head (R = q_len * group <= 8) against a long KV cache.
// One block per (key split, kv head, batch) serves every query head of the group, so each K/V
// row is read once. A warp scores KPW keys at a time: LPK = HD * sizeof(T) / 16 lanes per key,
// each lane holding 16 bytes of the key and value rows; every (warp, key subgroup) keeps its own
// online-softmax state, merged through shared memory at the end. Compiled per (T, M, HD, LPK, R,
// K_STATIC, V_STATIC, ROPE_Q, ROPE_K, NK, SMKV, CL; TC: the RoPE tables' type).
// SMKV (both caches leaves): the block's cached K/V rows are copied into shared memory (cp.async)
// before the programmatic-launch wait, so no key load waits on memory after it.
// CL > 1: the CL key splits of a (kv head, batch) form one thread-block cluster and merge their
// partials through distributed shared memory (no global partials, fence or ticket).
inline constexpr const char* kAttentionDecode = R"CUDA(
#ifndef K_STATIC
#define K_STATIC 0
#endif
#ifndef PK
#define PK 2  // keys per key group loaded before the wait
#endif
#ifndef V_STATIC
#define V_STATIC 0
#endif
#ifndef ROPE_Q
#define ROPE_Q 0
#endif
#ifndef ROPE_K
#define ROPE_K 0
#endif
#ifndef NK
#define NK 0  // ROPE_K: the new K rows (one rope's positions)
#endif
#ifndef SMKV
#define SMKV 0
#endif
#ifndef CL
#define CL 0
#endif
#if SMKV
// 16 bytes global -> shared, asynchronously.
__device__ __forceinline__ void kv_cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
}
#endif
#if CL > 1
// Every thread of every block of the cluster arrives; shared-memory writes before it are visible
// to the cluster's blocks after it.
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// A float of block `rank`'s shared memory at the place of `p` in this block's.
__device__ __forceinline__ float ld_cluster_f(const float* p, unsigned rank) {
  unsigned addr;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(addr) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
#endif
// One element read through the read-only path (no store of the kernel can alias it, so the
// prologue's loads all go out together).
__device__ __forceinline__ float ldg_f(const float* p) { return __ldg(p); }
__device__ __forceinline__ float ldg_f(const f16_t* p) {
  f16_t r; r.b = __ldg(reinterpret_cast<const unsigned short*>(p)); return to_f(r);
}
__device__ __forceinline__ float ldg_f(const bf16_t* p) {
  bf16_t r; r.b = __ldg(reinterpret_cast<const unsigned short*>(p)); return to_f(r);
}
#if ROPE_Q || ROPE_K
// Element d of a q or new K row as the Rope step would have stored it (rounded to T); s: the
// row's position among that rope's `seq` positions.
__device__ __forceinline__ float rope_elem(const AttnArgs& a, const T* row, int d, long long b, long long s,
                                           long long seq) {
  const bool rot = d < a.rope_rot;
  const int half = (int)(a.rope_rot / 2);
  const bool first = a.rope_neox ? d < half : (d & 1) == 0;
  const int p = a.rope_neox ? (first ? d : d - half) : d >> 1;
  const int i1 = rot ? (a.rope_neox ? p : 2 * p) : d, i2 = rot ? (a.rope_neox ? p + half : 2 * p + 1) : d;
  const long long t = (a.rope_per_batch ? b * seq + s : s) * half + p;
  const float x1 = ldg_f(row + i1), x2 = ldg_f(row + i2);
  const float c = rot ? ldg_f(reinterpret_cast<const TC*>(a.rope_cos) + t) : 1.f;
  const float sn = rot ? ldg_f(reinterpret_cast<const TC*>(a.rope_sin) + t) : 0.f;
  if (!rot) return x1;
  return to_f(from_f<T>(first ? x1 * c - x2 * sn : x2 * c + x1 * sn));
}
#endif
#define NW 4
#define KPW (32 / LPK)
#define VE (16 / (int)sizeof(T))
#define NG (NW * KPW)
extern "C" __global__ void __launch_bounds__(NW * 32) attn_decode(AttnArgs a) {
  extern __shared__ float smem[];
  // SMKV: [2][split_len][HD] of T, the block's cached K then V rows (16-byte rows).
  float* sq = smem + (SMKV ? 2 * a.split_len * HD * (int)sizeof(T) / 4 : 0);  // [R][HD] query rows
  T* sk = reinterpret_cast<T*>(sq + R * HD);  // ROPE_K: [NK][HD] the new K rows, rotated
  float* mg = sq + R * HD + (ROPE_K ? (NK * HD * (int)sizeof(T) + 3) / 4 : 0);  // [NG][R][HD + 2] per-subgroup acc, max, sum
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / LPK, sl = lane % LPK, grp = warp * KPW + sub;
  const unsigned mask = LPK == 32 ? 0xffffffffu : (((1u << LPK) - 1u) << (sub * LPK));
  const long long b = blockIdx.z, kvh = blockIdx.y;
  long long lo = (long long)blockIdx.x * a.split_len;
  long long hi = min(a.kv_len, lo + a.split_len);
  const long long offset = a.kv_len - a.q_len;
  if (a.mask_kind == 1 || a.mask_kind == 2) hi = min(hi, offset + a.q_len);
  if (a.mask_kind == 2) lo = max(lo, offset - a.window + 1);
  const int d0 = sl * VE;
  const long long base = lo < 0 ? 0 : lo, key0 = base + grp;  // the block's and this key group's first key
  T* skc = reinterpret_cast<T*>(smem);  // SMKV: the block's cached K rows, then V rows
  T* svc = skc + a.split_len * HD;
#if SMKV
  // Every cached key and value row of the block, into shared memory before the wait.
  {
    const long long nk = max(0ll, min(hi, a.k_split) - base) * LPK, nv = max(0ll, min(hi, a.v_split) - base) * LPK;
    for (long long i = threadIdx.x; i < nk; i += NW * 32) {
      const long long key = base + i / LPK, c = i % LPK;
      kv_cp_async16(skc + (key - base) * HD + c * VE, a.k + b * a.ks_b + key * a.ks_s + kvh * a.ks_h + c * VE);
    }
    for (long long i = threadIdx.x; i < nv; i += NW * 32) {
      const long long key = base + i / LPK, c = i % LPK;
      kv_cp_async16(svc + (key - base) * HD + c * VE, a.v + b * a.vs_b + key * a.vs_s + kvh * a.vs_h + c * VE);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }
#else
  // The first PK keys of a K/V part that no kernel writes (K_STATIC / V_STATIC: a KV cache held
  // in params) are loaded before waiting for the previous kernel.
  Vec<T, VE> kpre[PK], vpre[PK];
  bool kp_ok[PK], vp_ok[PK];
#pragma unroll
  for (int j = 0; j < PK; ++j) {
    const long long key = key0 + (long long)j * NG;
    kp_ok[j] = K_STATIC && key < hi && key < a.k_split;
    vp_ok[j] = V_STATIC && key < hi && key < a.v_split;
    if (kp_ok[j]) kpre[j] = *reinterpret_cast<const Vec<T, VE>*>(a.k + b * a.ks_b + key * a.ks_s + kvh * a.ks_h + d0);
    if (vp_ok[j]) vpre[j] = *reinterpret_cast<const Vec<T, VE>*>(a.v + b * a.vs_b + key * a.vs_s + kvh * a.vs_h + d0);
  }
#endif
  rlx_pdl_begin();
  // The q rows (rotated with ROPE_Q) and, with ROPE_K, the new K rows of a split that reads
  // them: every load first (compile-time trip counts, read-only path), then the stores.
#define QE ((R * HD + NW * 32 - 1) / (NW * 32))
  float qv[QE];
#pragma unroll
  for (int j = 0; j < QE; ++j) {
    const int i = j * NW * 32 + threadIdx.x, r = i / HD, d = i % HD;
    const long long qi = r / a.group, h = kvh * a.group + r % a.group;
    const T* qrow = a.q + b * a.qs_b + qi * a.qs_s + h * a.qs_h;
    qv[j] = 0.f;
#if ROPE_Q
    if (i < R * HD) qv[j] = rope_elem(a, qrow, d, b, qi, a.q_len);
#else
    if (i < R * HD) qv[j] = ldg_f(qrow + d);
#endif
  }
#if ROPE_K
#define KE ((NK * HD + NW * 32 - 1) / (NW * 32))
  const bool new_rows = hi > a.k_split;
  float kn[KE];
#pragma unroll
  for (int j = 0; j < KE; ++j) {
    const int i = j * NW * 32 + threadIdx.x, r = i / HD;
    kn[j] = 0.f;
    if (new_rows && i < NK * HD)
      kn[j] = rope_elem(a, a.k2 + b * a.k2s_b + r * a.k2s_s + kvh * a.k2s_h, i % HD, b, r, NK);
  }
#pragma unroll
  for (int j = 0; j < KE; ++j) {
    const int i = j * NW * 32 + threadIdx.x;
    if (new_rows && i < NK * HD) sk[i] = from_f<T>(kn[j]);
  }
#endif
#pragma unroll
  for (int j = 0; j < QE; ++j) {
    const int i = j * NW * 32 + threadIdx.x;
    if (i < R * HD) sq[i] = qv[j];
  }
#if SMKV
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
  __syncthreads();

  float m[R], l[R], acc[R][VE];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = RLX_NEG_INF, l[r] = 0.f;
#pragma unroll
    for (int e = 0; e < VE; ++e) acc[r][e] = 0.f;
  }
  int it = 0;  // iteration: keys key0 + it * NG
  for (long long key = key0; key < hi; key += NG, ++it) {
    const T* kp = key < a.k_split ? (SMKV ? skc + (key - base) * HD : a.k + b * a.ks_b + key * a.ks_s + kvh * a.ks_h)
                  : ROPE_K        ? sk + (key - a.k_split) * HD  // the rotated new rows, in shared memory
                                  : a.k2 + b * a.k2s_b + (key - a.k_split) * a.k2s_s + kvh * a.k2s_h;
    const T* vp = key < a.v_split ? (SMKV ? svc + (key - base) * HD : a.v + b * a.vs_b + key * a.vs_s + kvh * a.vs_h)
                                  : a.v2 + b * a.v2s_b + (key - a.v_split) * a.v2s_s + kvh * a.v2s_h;
    Vec<T, VE> kr, vr;
    bool kdone = false, vdone = false;
#if !SMKV
#pragma unroll
    for (int j = 0; j < PK; ++j)
      if (it == j) {
        if (kp_ok[j]) kr = kpre[j], kdone = true;
        if (vp_ok[j]) vr = vpre[j], vdone = true;
      }
#endif
    if (!kdone) kr = *reinterpret_cast<const Vec<T, VE>*>(kp + d0);
    if (!vdone) vr = *reinterpret_cast<const Vec<T, VE>*>(vp + d0);
    float kf[VE], vf[VE];
#pragma unroll
    for (int e = 0; e < VE; ++e) kf[e] = to_f(kr.v[e]), vf[e] = to_f(vr.v[e]);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < VE; ++e) dot = fmaf(sq[r * HD + d0 + e], kf[e], dot);
#pragma unroll
      for (int o = LPK / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(mask, dot, o);
      const long long qi = r / a.group, h = kvh * a.group + r % a.group;
      const float x = attn_score(a, dot, b, h, qi, key, lo, hi);
      const float mn = fmaxf(m[r], x);
      if (mn == RLX_NEG_INF) continue;  // nothing kept yet for this row
      const float corr = __expf(m[r] - mn), p = __expf(x - mn);
      l[r] = l[r] * corr + p;
#pragma unroll
      for (int e = 0; e < VE; ++e) acc[r][e] = acc[r][e] * corr + p * vf[e];
      m[r] = mn;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float* g = mg + ((long long)grp * R + r) * (HD + 2);
#pragma unroll
    for (int e = 0; e < VE; ++e) g[d0 + e] = acc[r][e];
    if (sl == 0) g[HD] = m[r], g[HD + 1] = l[r];
  }
  __syncthreads();
  const long long rows = a.batch * a.heads * a.q_len;
  for (int i = threadIdx.x; i < R * HD; i += blockDim.x) {
    const int r = i / HD, d = i % HD;
    float mx = RLX_NEG_INF;
    for (int q = 0; q < NG; ++q) mx = fmaxf(mx, mg[((long long)q * R + r) * (HD + 2) + HD]);
    float sum = 0.f, val = 0.f;
    if (mx != RLX_NEG_INF)
      for (int q = 0; q < NG; ++q) {
        const float* g = mg + ((long long)q * R + r) * (HD + 2);
        const float c = g[HD] == RLX_NEG_INF ? 0.f : __expf(g[HD] - mx);
        sum += g[HD + 1] * c, val += g[d] * c;
      }
#if CL > 1
    float* bp = mg + NG * R * (HD + 2);  // [R][HD + 2] this split's acc, max, sum
    bp[r * (HD + 2) + d] = val;
    if (d == 0) bp[r * (HD + 2) + HD] = mx, bp[r * (HD + 2) + HD + 1] = sum;
#else
    const long long qi = r / a.group, h = kvh * a.group + r % a.group;
    if (a.part) {
      float* pp = a.part + (((long long)blockIdx.x * rows) + (b * a.heads + h) * a.q_len + qi) * (HD + 2);
      pp[d] = val;
      if (d == 0) pp[HD] = mx, pp[HD + 1] = sum;
    } else {
      a.out[b * a.os_b + qi * a.os_s + h * a.os_h + d] = from_f<T>(sum > 0.f ? val / sum : 0.f);
    }
#endif
  }
#if CL > 1
  // The cluster's CL splits merge through distributed shared memory: block `rank` writes the
  // result elements rank, rank + CL, ..., reading every split's partial of each in one round.
  cluster_sync_all();
  {
    const float* bp = mg + NG * R * (HD + 2);
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    for (int i = rank + CL * threadIdx.x; i < R * HD; i += CL * NW * 32) {
      const int r = i / HD, d = i % HD;
      float pm[CL], pl[CL], pv[CL], mx = RLX_NEG_INF;
#pragma unroll
      for (int sp = 0; sp < CL; ++sp) {
        pm[sp] = ld_cluster_f(bp + r * (HD + 2) + HD, sp);
        pl[sp] = ld_cluster_f(bp + r * (HD + 2) + HD + 1, sp);
        pv[sp] = ld_cluster_f(bp + r * (HD + 2) + d, sp);
      }
#pragma unroll
      for (int sp = 0; sp < CL; ++sp) mx = fmaxf(mx, pm[sp]);
      float sum = 0.f, val = 0.f;
#pragma unroll
      for (int sp = 0; sp < CL; ++sp) {
        const float c = mx == RLX_NEG_INF || pm[sp] == RLX_NEG_INF ? 0.f : __expf(pm[sp] - mx);
        sum += pl[sp] * c, val += pv[sp] * c;
      }
      const long long qi = r / a.group, h = kvh * a.group + r % a.group;
      a.out[b * a.os_b + qi * a.os_s + h * a.os_h + d] = from_f<T>(sum > 0.f ? val / sum : 0.f);
    }
  }
  cluster_sync_all();  // no block leaves while another still reads its shared memory
  return;
#endif
  if (!a.part) return;
  // Split-KV: the last block of this (batch, kv head) to finish merges every split's partial.
  __shared__ bool last;
  __threadfence();  // this block's partials are visible device-wide before its ticket
  __syncthreads();
  unsigned* ticket = a.tickets + b * gridDim.y + kvh;
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int S = gridDim.x;
  float* cm = smem;       // [R][S] each split's max, then its weight
  float* cl = cm + R * S;  // [R][S] each split's sum
  float* inv = cl + R * S; // [R] 1 / total sum
  for (int i = threadIdx.x; i < R * S; i += blockDim.x) {
    const int r = i / S, sp = i - r * S;
    const long long qi = r / a.group, h = kvh * a.group + r % a.group;
    const float* pp = a.part + ((long long)sp * rows + (b * a.heads + h) * a.q_len + qi) * (HD + 2);
    cm[i] = __ldcg(pp + HD), cl[i] = __ldcg(pp + HD + 1);
  }
  __syncthreads();
  for (int r = threadIdx.x; r < R; r += blockDim.x) {
    float mx = RLX_NEG_INF, l = 0.f;
    for (int sp = 0; sp < S; ++sp) mx = fmaxf(mx, cm[r * S + sp]);
    for (int sp = 0; sp < S; ++sp) {
      const float c = mx == RLX_NEG_INF || cm[r * S + sp] == RLX_NEG_INF ? 0.f : __expf(cm[r * S + sp] - mx);
      cm[r * S + sp] = c, l += cl[r * S + sp] * c;
    }
    inv[r] = l > 0.f ? 1.f / l : 0.f;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < R * HD; i += blockDim.x) {
    const int r = i / HD, d = i % HD;
    const long long qi = r / a.group, h = kvh * a.group + r % a.group;
    const float* pp = a.part + ((b * a.heads + h) * a.q_len + qi) * (HD + 2) + d;
    float val = 0.f;
#pragma unroll 8
    for (int sp = 0; sp < S; ++sp) val += __ldcg(pp + (long long)sp * rows * (HD + 2)) * cm[r * S + sp];
    a.out[b * a.os_b + qi * a.os_s + h * a.os_h + d] = from_f<T>(val * inv[r]);
  }
  if (threadIdx.x == 0) *ticket = 0u;  // ready for the next run (or graph replay)
}
)CUDA";

}  // namespace rlx::cuda::ksrc
