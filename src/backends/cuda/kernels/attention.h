#pragma once
// Flash-style attention (online softmax, K/V tiles in shared memory, f32 accumulation).
// Compiled per (T = q/k/v/out storage type, M = mask/bias type, HD = head_dim, a multiple of 4,
// RPW = query rows per warp, chosen by the lowering from HD).
//
// Grid: x = query blocks of QB = 4 RPW rows, y = batch * num_heads, z = KV splits. Each warp owns
// RPW query rows; lane l scores key (tile + l) against all of the warp's rows, then the warp
// stores its probabilities in shared memory and the lanes split the head dims to accumulate
// P @ V, 4 keys per step (a 16-byte load of P per row). With splits > 1 (decode: few query rows, long KV)
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
  int mask_kind;  // 0 none, 1 causal, 2 sliding window, 3 custom (keep), 4 bias, 5 positions (POS_MASK, M integer)
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

// Merging split-KV partial results (attn_combine, and attn_decode's cluster and ticket merges): a
// split whose running max is m weighs exp(m - mx) against the row's overall max mx, and 0 when it
// saw no unmasked key (m = -inf) or no split did (mx = -inf); the merged row is its weighted sum
// times split_inv_sum(the weighted sums of exponentials), 0 for a row without unmasked keys.
__device__ __forceinline__ float split_weight(float m, float mx) {
  return mx == RLX_NEG_INF || m == RLX_NEG_INF ? 0.f : __expf(m - mx);
}
__device__ __forceinline__ float split_inv_sum(float l) { return l > 0.f ? 1.f / l : 0.f; }

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
#ifdef POS_MASK
  else if (a.mask_kind == 5) keep = keep && key <= (long long)a.mask[b * a.mask_batch + row];
#endif
  else if (a.mask_kind == 4 && keep)
    x += to_f(a.mask[b * a.bias_s[0] + h * a.bias_s[1] + row * a.bias_s[2] + key * a.bias_s[3]]);
  return keep ? x : RLX_NEG_INF;
}
)CUDA";

inline constexpr const char* kAttention = R"CUDA(
#ifndef RPW
#define RPW 4
#endif
#define QB (4 * RPW)
#define KT 32
#define DE ((HD + 31) / 32)
#define KS (HD + 4)

extern "C" __global__ void __launch_bounds__(128) attention(AttnArgs a) {
  rlx_pdl_begin();
  extern __shared__ float smem[];
  float* sQ = smem;                  // QB x HD
  float* sK = sQ + QB * HD;          // KT x KS (rows padded by 4 floats: conflict-free float4 reads)
  float* sV = sK + KT * KS;          // KT x HD
  float* sP = sV + KT * HD;          // 4 warps x RPW x KT: each warp's probabilities of a tile
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
#ifdef POS_MASK
  if (a.mask_kind == 5) {  // keys up to the block's largest position: a length known at run time
    long long top = -1;
    for (long long r = q0; r < min(q0 + QB, a.q_len); ++r) top = max(top, (long long)a.mask[b * a.mask_batch + r]);
    hi = min(hi, top + 1);
  }
#endif

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
    // P through shared memory, read 4 keys at a time (the last keys of the tile one by one).
    float* wp = sP + warp * RPW * KT;
#pragma unroll
    for (int r = 0; r < RPW; ++r) wp[r * KT + lane] = p[r];
    __syncwarp();
    const int kmax = (int)min((long long)KT, hi - t0);
    int j = 0;
    for (; j + 4 <= kmax; j += 4) {
      float vv[4][DE];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj)
#pragma unroll
        for (int e = 0; e < DE; ++e) vv[jj][e] = (lane + 32 * e < HD) ? sV[(j + jj) * HD + lane + 32 * e] : 0.f;
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        const float4 pj = *(const float4*)&wp[r * KT + j];
#pragma unroll
        for (int e = 0; e < DE; ++e) {
          acc[r][e] = fmaf(pj.x, vv[0][e], acc[r][e]);
          acc[r][e] = fmaf(pj.y, vv[1][e], acc[r][e]);
          acc[r][e] = fmaf(pj.z, vv[2][e], acc[r][e]);
          acc[r][e] = fmaf(pj.w, vv[3][e], acc[r][e]);
        }
      }
    }
    for (; j < kmax; ++j) {
      float vv[DE];
#pragma unroll
      for (int e = 0; e < DE; ++e) vv[e] = (lane + 32 * e < HD) ? sV[j * HD + lane + 32 * e] : 0.f;
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        const float pj = wp[r * KT + j];
#pragma unroll
        for (int e = 0; e < DE; ++e) acc[r][e] = fmaf(pj, vv[e], acc[r][e]);
      }
    }
    __syncwarp();  // the next tile rewrites wp
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
        const float c = split_weight(pp[HD], mx);
        l += pp[HD + 1] * c;
#pragma unroll
        for (int e = 0; e < DE; ++e)
          if (lane + 32 * e < HD) acc[e] += pp[lane + 32 * e] * c;
      }
    }
    T* o = a.out + b * a.os_b + row * a.os_s + h * a.os_h;
    const float inv = split_inv_sum(l);
#pragma unroll
    for (int e = 0; e < DE; ++e)
      if (lane + 32 * e < HD) o[lane + 32 * e] = from_f<T>(acc[e] * inv);
  }
}
)CUDA";

// Loads of both decode kernels (attn_decode here, attn_decode_tc in attention_decode_tc.h), and
// the defaults of their shared defines: one element through the read-only path, and the RoPE of q
// and the new K rows applied on load (with ROPE_Q / ROPE_K; TC: the tables' type). Placed after
// kAttentionCommon.
inline constexpr const char* kAttentionDecodeLoads = R"CUDA(
#ifndef ROPE_Q
#define ROPE_Q 0
#endif
#ifndef ROPE_K
#define ROPE_K 0
#endif
#ifndef K_STATIC
#define K_STATIC 0  // the cached K rows are a leaf: read before the wait
#endif
#ifndef V_STATIC
#define V_STATIC 0
#endif
#ifndef NK
#define NK 0  // the new K rows staged in shared memory (ROPE_K: rotated; one rope's positions)
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
// Element d of a q or new K row as the Rope step would have stored it (rounded to T), in two
// steps so that a caller issues every load before using any: rope_load reads the four operands
// (unconditionally: an element outside the rotated part reads table entry 0, unused), rope_value
// combines them. s: the row's position among that rope's `seq` positions.
// rope_load_table / rope_load_row: the same in two halves, the tables' (which a kernel may read
// before its wait when they are leaves) and the row's (i1, i2: the row elements it reads).
struct RopeIn { float x1, x2, c, sn; bool rot, first; int i1, i2; };
__device__ __forceinline__ RopeIn rope_load_table(const AttnArgs& a, int d, long long b, long long s, long long seq) {
  RopeIn o;
  o.rot = d < a.rope_rot;
  const int half = (int)(a.rope_rot / 2);
  o.first = a.rope_neox ? d < half : (d & 1) == 0;
  const int p = a.rope_neox ? (o.first ? d : d - half) : d >> 1;
  int r1, r2;
  rope_pair(a.rope_neox != 0, p, half, r1, r2);
  o.i1 = o.rot ? r1 : d, o.i2 = o.rot ? r2 : d;
  const long long t = o.rot ? (a.rope_per_batch ? b * seq + s : s) * half + p : 0;
  o.c = ldg_f(reinterpret_cast<const TC*>(a.rope_cos) + t), o.sn = ldg_f(reinterpret_cast<const TC*>(a.rope_sin) + t);
  return o;
}
__device__ __forceinline__ void rope_load_row(RopeIn& o, const T* row) { o.x1 = ldg_f(row + o.i1), o.x2 = ldg_f(row + o.i2); }
__device__ __forceinline__ RopeIn rope_load(const AttnArgs& a, const T* row, int d, long long b, long long s,
                                            long long seq) {
  RopeIn o = rope_load_table(a, d, b, s, seq);
  rope_load_row(o, row);
  return o;
}
__device__ __forceinline__ float rope_value(const RopeIn& o) {
  if (!o.rot) return o.x1;
  return to_f(from_f<T>(rope_rotate(o.first, o.x1, o.x2, o.c, o.sn)));
}
#endif
)CUDA";

// Decode attention: few query rows per KV head (R = q_len * group <= 8) against a long KV cache.
// One block of 4 warps per (key split, kv head, batch) serves every query head of the group, so
// each K/V row is read once. Its keys go in chunks of KC, each in three short passes so that the
// serial path after the programmatic-launch wait stays a few hundred instructions: a lane scores
// one key against one row (a warp per (row, 32 keys)), a warp updates one row's online softmax,
// and a thread accumulates P @ V for one 16-byte piece of the rows over a key group; the key
// groups' sums are added through shared memory at the end. Compiled per (T, M, HD, R, K_STATIC,
// V_STATIC, ROPE_Q, ROPE_K, NK, NV, SMKV, CL; TC: the RoPE tables' type).
// NK / NV: the new K / V rows (the second part of a concatenated cache, read in place) staged in
// shared memory after the wait, rotated when ROPE_K; 0: read from global memory.
// SMKV (both caches leaves): the block's cached K/V rows are copied into shared memory (cp.async)
// before the wait, so no key load waits on memory after it; otherwise leaf caches are prefetched
// into L2 before it.
// CL > 1: the CL key splits of a (kv head, batch) form one thread-block cluster and merge their
// partials through distributed shared memory (no global partials, fence or ticket).
// Keys per chunk of attn_decode (its KC): the host sizes the kernel's shared memory by it.
inline constexpr int kDecodeChunkKeys = 128;
inline constexpr const char* kAttentionDecode = R"CUDA(
#ifndef NV
#define NV 0  // the new V rows staged in shared memory
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
// Stores v into block `rank`'s shared memory at the place of `p` in this block's.
__device__ __forceinline__ void st_cluster_f(float* p, unsigned rank, float v) {
  unsigned addr;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(addr) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}
#define EPO ((R * HD + CL - 1) / CL)  // result elements each block of the cluster merges
#endif
#define NW 4
#define NT (NW * 32)
#define VE (16 / (int)sizeof(T))
#define NDC (HD / VE)  // 16-byte pieces of a row
#define KG (NT / NDC)  // key groups of the P @ V pass
#define KS (HD + VE)   // elements per K row in shared memory, padded so that lanes reading a row each hit distinct banks
#ifndef KC
#error "KC (keys per chunk, ksrc::kDecodeChunkKeys) is defined by the host, which sizes the shared memory by it"
#endif
#define KSUB (KC / 32)
extern "C" __global__ void __launch_bounds__(NT) attn_decode(AttnArgs a) {
  // Shared memory: [SMKV: split_len K rows (stride KS), split_len V rows (HD) of T] sq [R][HD] f32,
  // sk [NK][KS] and sv [NV][HD] of T (the new rows), sc [R][KC] f32 (a chunk's scores, then
  // weights), part [KG][R][HD] f32 (each key group's P @ V), rm / rl / rc [R] (running max, sum,
  // the chunk's correction), CL > 1: the merge's inbox (below).
  extern __shared__ float smem[];
  T* skc = reinterpret_cast<T*>(smem);
  T* svc = skc + (SMKV ? a.split_len * KS : 0);
  float* sq = reinterpret_cast<float*>(svc + (SMKV ? a.split_len * HD : 0));
  T* sk = reinterpret_cast<T*>(sq + R * HD);
  T* sv = sk + NK * KS;
  float* sc = reinterpret_cast<float*>(sv + NV * HD);
  float* part = sc + R * KC;
  float* rm = part + KG * R * HD;
  float* rl = rm + R;
  float* rc = rl + R;
#if CL > 1
  float* mg = rc + R;  // [CL][EPO] the partials of the elements this block merges, then [CL][R][2] every split's row max and sum
  unsigned crank;  // this block's rank in the cluster (its split)
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(crank));
#endif
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long b = blockIdx.z, kvh = blockIdx.y;
  long long lo = (long long)blockIdx.x * a.split_len;
  long long hi = min(a.kv_len, lo + a.split_len);
  const long long offset = a.kv_len - a.q_len;
  if (a.mask_kind == 1 || a.mask_kind == 2) hi = min(hi, offset + a.q_len);
  if (a.mask_kind == 2) lo = max(lo, offset - a.window + 1);
#ifdef POS_MASK
  // Keys up to the largest position of the batch's rows (the positions are a leaf, uploaded before
  // any kernel: read before the wait). Splits past it see no key.
  if (a.mask_kind == 5) {
    long long top = -1;
    for (long long r = 0; r < a.q_len; ++r) top = max(top, (long long)a.mask[b * a.mask_batch + r]);
    hi = min(hi, top + 1);
  }
#endif
  const long long base = lo < 0 ? 0 : lo;  // the block's first key
  const long long kc_end = min(hi, a.k_split), vc_end = min(hi, a.v_split);  // its cached rows end
#if SMKV
  // Every cached key and value row of the block, into shared memory before the wait.
  {
    const long long nk = max(0ll, kc_end - base) * NDC, nv = max(0ll, vc_end - base) * NDC;
    for (long long i = threadIdx.x; i < nk; i += NT) {
      const long long key = base + i / NDC, c = i % NDC;
      kv_cp_async16(skc + (key - base) * KS + c * VE, a.k + b * a.ks_b + key * a.ks_s + kvh * a.ks_h + c * VE);
    }
    for (long long i = threadIdx.x; i < nv; i += NT) {
      const long long key = base + i / NDC, c = i % NDC;
      kv_cp_async16(svc + (key - base) * HD + c * VE, a.v + b * a.vs_b + key * a.vs_s + kvh * a.vs_h + c * VE);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }
#else
  // Cached rows that no kernel writes (K_STATIC / V_STATIC: a KV cache held in params) are
  // prefetched into L2 before waiting for the previous kernel.
  for (long long key = base + threadIdx.x; K_STATIC && key < kc_end; key += NT)
    rlx_prefetch_line_l2(a.k + b * a.ks_b + key * a.ks_s + kvh * a.ks_h);
  for (long long key = base + threadIdx.x; V_STATIC && key < vc_end; key += NT)
    rlx_prefetch_line_l2(a.v + b * a.vs_b + key * a.vs_s + kvh * a.vs_h);
#endif
  rlx_pdl_begin();
  // The q rows (rotated with ROPE_Q) and the new K / V rows this block reads (rotated with
  // ROPE_K): every load first, from valid addresses whatever the element (compile-time trip
  // counts, no branches, the read-only path), so that they all go out in one round; then the
  // values and the stores.
#define QE ((R * HD + NT - 1) / NT)
#if ROPE_Q
  RopeIn qin[QE];
#else
  float qv[QE];
#endif
#pragma unroll
  for (int j = 0; j < QE; ++j) {
    const int i = min(j * NT + (int)threadIdx.x, R * HD - 1), r = i / HD, d = i % HD;
    const long long qi = r / a.group, h = kvh * a.group + r % a.group;
    const T* qrow = a.q + b * a.qs_b + qi * a.qs_s + h * a.qs_h;
#if ROPE_Q
    qin[j] = rope_load(a, qrow, d, b, qi, a.q_len);
#else
    qv[j] = ldg_f(qrow + d);
#endif
  }
#if NK
#define KE ((NK * HD + NT - 1) / NT)
  const bool new_k = hi > a.k_split;
#if ROPE_K
  RopeIn kin[KE];
#else
  float kn[KE];
#endif
#pragma unroll
  for (int j = 0; j < KE; ++j) {
    const int i = min(j * NT + (int)threadIdx.x, NK * HD - 1), r = i / HD;
    const T* row = a.k2 + b * a.k2s_b + r * a.k2s_s + kvh * a.k2s_h;
#if ROPE_K
    kin[j] = rope_load(a, row, i % HD, b, r, NK);
#else
    kn[j] = ldg_f(row + i % HD);
#endif
  }
#endif
#if NV
#define VE2 ((NV * HD + NT - 1) / NT)
  const bool new_v = hi > a.v_split;
  float vn[VE2];
#pragma unroll
  for (int j = 0; j < VE2; ++j) {
    const int i = min(j * NT + (int)threadIdx.x, NV * HD - 1), r = i / HD;
    vn[j] = ldg_f(a.v2 + b * a.v2s_b + r * a.v2s_s + kvh * a.v2s_h + i % HD);
  }
#endif
#if NK
#pragma unroll
  for (int j = 0; j < KE; ++j) {
    const int i = j * NT + threadIdx.x;
#if ROPE_K
    if (new_k && i < NK * HD) sk[(i / HD) * KS + i % HD] = from_f<T>(rope_value(kin[j]));
#else
    if (new_k && i < NK * HD) sk[(i / HD) * KS + i % HD] = from_f<T>(kn[j]);
#endif
  }
#endif
#if NV
#pragma unroll
  for (int j = 0; j < VE2; ++j) {
    const int i = j * NT + threadIdx.x;
    if (new_v && i < NV * HD) sv[i] = from_f<T>(vn[j]);
  }
#endif
#pragma unroll
  for (int j = 0; j < QE; ++j) {
    const int i = j * NT + threadIdx.x;
#if ROPE_Q
    if (i < R * HD) sq[i] = rope_value(qin[j]);
#else
    if (i < R * HD) sq[i] = qv[j];
#endif
  }
  if (threadIdx.x < R) rm[threadIdx.x] = RLX_NEG_INF, rl[threadIdx.x] = 0.f;
#if SMKV
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
  __syncthreads();
  // Where key `key`'s K and V rows are: shared memory (cached rows with SMKV, staged new rows) or
  // global memory.
#define K_ROW(key)                                                                                  \
  ((key) < a.k_split ? (SMKV ? skc + ((key) - base) * KS : a.k + b * a.ks_b + (key) * a.ks_s + kvh * a.ks_h) \
   : NK ? sk + ((key) - a.k_split) * KS : a.k2 + b * a.k2s_b + ((key) - a.k_split) * a.k2s_s + kvh * a.k2s_h)
#define V_ROW(key)                                                                                  \
  ((key) < a.v_split ? (SMKV ? svc + ((key) - base) * HD : a.v + b * a.vs_b + (key) * a.vs_s + kvh * a.vs_h) \
   : NV ? sv + ((key) - a.v_split) * HD : a.v2 + b * a.v2s_b + ((key) - a.v_split) * a.v2s_s + kvh * a.v2s_h)

  // Chunks of KC keys, each in three passes: scores (a lane per key, a warp per (row, 32 keys)),
  // the rows' softmax update (a warp per row), P @ V (a thread per (16-byte piece, key group)).
  const int dc = threadIdx.x % NDC, kg = threadIdx.x / NDC;
  float acc[R][VE];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int e = 0; e < VE; ++e) acc[r][e] = 0.f;
  for (long long cb = base; cb < hi; cb += KC) {
    const int cn = (int)min((long long)KC, hi - cb);
    const int tasks = R * ((cn + 31) / 32);
    for (int task = warp; task < tasks; task += NW) {
      const int r = task % R, j = (task / R) * 32 + lane;
      float x = RLX_NEG_INF;
      if (j < cn) {
        const long long key = cb + j;
        const T* kp = K_ROW(key);
        const float4* q4 = reinterpret_cast<const float4*>(sq + r * HD);
        float d0 = 0.f, d1 = 0.f;
#pragma unroll
        for (int c = 0; c < NDC; ++c) {
          const Vec<T, VE> kv = *reinterpret_cast<const Vec<T, VE>*>(kp + c * VE);
#pragma unroll
          for (int e = 0; e < VE; e += 4) {
            const float4 qq = q4[(c * VE + e) / 4];
            d0 = fmaf(qq.x, to_f(kv.v[e]), d0);
            d1 = fmaf(qq.y, to_f(kv.v[e + 1]), d1);
            d0 = fmaf(qq.z, to_f(kv.v[e + 2]), d0);
            d1 = fmaf(qq.w, to_f(kv.v[e + 3]), d1);
          }
        }
        const long long qi = r / a.group, h = kvh * a.group + r % a.group;
        x = attn_score(a, d0 + d1, b, h, qi, key, lo, hi);
      }
      sc[r * KC + j] = x;
    }
    __syncthreads();
    for (int r = warp; r < R; r += NW) {
      float s[KSUB], cmax = RLX_NEG_INF;
#pragma unroll
      for (int i = 0; i < KSUB; ++i) {
        const int j = lane + 32 * i;
        s[i] = j < cn ? sc[r * KC + j] : RLX_NEG_INF;
        cmax = fmaxf(cmax, s[i]);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
      const float mo = rm[r], mn = fmaxf(mo, cmax);
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < KSUB; ++i) {
        const int j = lane + 32 * i;
        const float p = s[i] == RLX_NEG_INF ? 0.f : __expf(s[i] - mn);
        if (j < cn) sc[r * KC + j] = p;
        sum += p;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) {
        const float corr = mo == RLX_NEG_INF ? 0.f : __expf(mo - mn);
        rl[r] = rl[r] * corr + sum, rm[r] = mn, rc[r] = corr;
      }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float corr = rc[r];
#pragma unroll
      for (int e = 0; e < VE; ++e) acc[r][e] *= corr;
    }
    for (int j = kg; j < cn; j += KG) {
      const long long key = cb + j;
      const Vec<T, VE> vv = *reinterpret_cast<const Vec<T, VE>*>(V_ROW(key) + dc * VE);
      float vf[VE];
#pragma unroll
      for (int e = 0; e < VE; ++e) vf[e] = to_f(vv.v[e]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float p = sc[r * KC + j];
#pragma unroll
        for (int e = 0; e < VE; ++e) acc[r][e] = fmaf(p, vf[e], acc[r][e]);
      }
    }
    __syncthreads();  // the next chunk's scores overwrite sc
  }
  // The key groups' sums, added per result element.
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int e = 0; e < VE; e += 4)
      *reinterpret_cast<float4*>(part + (kg * R + r) * HD + dc * VE + e) =
          make_float4(acc[r][e], acc[r][e + 1], acc[r][e + 2], acc[r][e + 3]);
  __syncthreads();
  const long long rows = a.batch * a.heads * a.q_len;  // of the partials in global memory
  for (int i = threadIdx.x; i < R * HD; i += NT) {
    const int r = i / HD, d = i % HD;
    float val = 0.f;
#pragma unroll
    for (int q = 0; q < KG; ++q) val += part[(q * R + r) * HD + d];
#if CL > 1
    // Pushed to the block that merges element i (rank i % CL), into its slot for this split.
    st_cluster_f(mg + crank * EPO + i / CL, i % CL, val);
#else
    const float mx = rm[r], sum = rl[r];
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
  // The cluster's CL splits merge through distributed shared memory: every block has pushed each
  // result element's partial to the block that owns it (rank i % CL) and pushes its rows' max and
  // sum to every block; after one cluster barrier each block merges its own elements from its own
  // shared memory. No block reads another's afterwards, so none waits for the others to leave.
  for (int t = threadIdx.x; t < CL * R; t += NT) {
    const int owner = t / R, r = t % R;
    st_cluster_f(mg + CL * EPO + (crank * R + r) * 2, owner, rm[r]);
    st_cluster_f(mg + CL * EPO + (crank * R + r) * 2 + 1, owner, rl[r]);
  }
  cluster_sync_all();
  {
    const float* stats = mg + CL * EPO;  // [CL][R][2] every split's row max and sum
    for (int slot = threadIdx.x; slot < EPO; slot += NT) {
      const int i = crank + CL * slot;
      if (i >= R * HD) break;
      const int r = i / HD, d = i % HD;
      float mx = RLX_NEG_INF;
#pragma unroll
      for (int sp = 0; sp < CL; ++sp) mx = fmaxf(mx, stats[(sp * R + r) * 2]);
      float sum = 0.f, val = 0.f;
#pragma unroll
      for (int sp = 0; sp < CL; ++sp) {
        const float m = stats[(sp * R + r) * 2];
        const float c = split_weight(m, mx);
        sum += stats[(sp * R + r) * 2 + 1] * c, val += mg[sp * EPO + slot] * c;
      }
      const long long qi = r / a.group, h = kvh * a.group + r % a.group;
      a.out[b * a.os_b + qi * a.os_s + h * a.os_h + d] = from_f<T>(val * split_inv_sum(sum));
    }
  }
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
      const float c = split_weight(cm[r * S + sp], mx);
      cm[r * S + sp] = c, l += cl[r * S + sp] * c;
    }
    inv[r] = split_inv_sum(l);
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
