#pragma once
// GEMV over a packed weight (decode with params): C[MR, N] = epi(A[MR, K] @ W[K, N]) where W is a
// param or constant that the variant keeps on the device transposed, Wt[N, LDK] (LDK = K rounded
// up to 16 bytes, the padding zero; gemv_pack below rewrites it after every upload). Each output
// column is one contiguous row of Wt, so a warp streams whole rows with 16-byte loads (U per lane
// in flight): long sequential reads, no split-K partials, sums in a fixed order.
// One block of WARPS warps per multiprocessor. Rows go to (block, warp group) round-robin:
// row = blockIdx.x + gridDim.x * (group + GROUPS * round). When there are too few rows for every
// warp, WPR warps share one (each a contiguous slice of it) and the host launches one round.
// A sits in shared memory as T ([MR][LDK], zero padded), computed by the prologue when the
// variant absorbed A's producer (PRO as in gemv.h: 1 RmsNorm, 2 FusedSwiGLU); the RmsNorm's
// gain and bias follow it ([2][K]). Epilogue: c = ACT(acc + bias) + residual. Compiled per (T,
// B, MR, VW = elements per 16 bytes, WARPS, WPR, HAS_BIAS, BIAS_SCALAR, ACT, HAS_RES, PRO,
// HAS_PB, GATE_FIRST, G_STATIC = the gain and bias are leaves, VEC_A = K is a multiple of VW and
// A's source is 16-byte aligned: A is read in 16-byte words, all in one round; EVF = Wt is loaded
// with the L2 evict-first policy, see the prelude). pf/pf_bytes: the next packed GEMV's weight,
// whose first pf_bytes (a multiple of 16; 0: none) this launch prefetches into L2 (the weight
// stream, LowerContext::WeightStream); early_dependents: let the next kernel launch before this
// one's wait.
// TC (f16 / bf16, with kernels/mma.h before it): the products run on the tensor cores. Wt is then
// packed in tiles of 16 output columns x 16 k (gemv_pack with TILES), 512 contiguous bytes that
// are one warp's A fragments of mma.m16n8k16: lane l = 4 g + t holds columns g and g + 8 at k
// 4t .. 4t + 3 (the k order inside a tile permuted so that the lane's B fragment is 4 adjacent
// elements of A's row). A "row" of the loop is a tile row (16 columns, all of LDK, LDK a multiple
// of 16): each 16-byte word a lane loads is one mma against A (B column g = A row min(g, MR - 1)),
// where the CUDA-core loop spends a shared load, 16 conversions and 8 FMAs. The WPR warps of a
// group each take a contiguous slice of the tile row (whole tiles) over any number of rounds and
// add their sums in shared memory in slice order (deterministic), meeting at a named barrier of
// the group (at most 15 groups); the sums' order differs from the CUDA-core kernel's.
namespace rlx::cuda::ksrc {

inline constexpr const char* kGemvPacked = R"CUDA(
#define GROUPS (WARPS / WPR)
#define U 8
#ifndef TC
#define TC 0
#endif
// At most 64 registers per thread: a block of fewer than 32 warps leaves room on its
// multiprocessor for another kernel's small blocks (the next launch's early loads).
#if WARPS == 32
#define PACKED_BOUNDS __launch_bounds__(1024, 1)
#else
#define PACKED_BOUNDS __maxnreg__(64)
#endif
extern "C" __global__ void PACKED_BOUNDS
    gemv_packed(const T* __restrict__ a, const T* __restrict__ w, const B* __restrict__ bias, const T* __restrict__ res,
                T* __restrict__ c, long long k, long long ldk, long long n, const T* __restrict__ px,
                const T* __restrict__ pg, const T* __restrict__ pb, float eps, const char* __restrict__ pf,
                long long pf_bytes, int early_dependents) {
  extern __shared__ uint4 xs4[];  // A: [MR][ldk / VW] words of 16 bytes
  T* xs = reinterpret_cast<T*>(xs4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / WPR, slice = warp % WPR;
#if TC
  const long long kv = ldk * 16 / VW;  // 16-byte words per tile row: 32 per tile
  const long long nrows = (n + 15) / 16;
  const long long per = (kv / 32 + WPR - 1) / WPR * 32;  // whole tiles
#else
  const long long kv = ldk / VW;  // 16-byte words per row of Wt
  const long long nrows = n;
  const long long per = (kv + WPR - 1) / WPR;
#endif
  const long long cb = slice * per, ce = min(kv, cb + per);  // this warp's words of each row
  const long long stride = (long long)gridDim.x * GROUPS;
  const uint4* w4 = reinterpret_cast<const uint4*>(w);
  long long row = blockIdx.x + (long long)gridDim.x * group, q0 = cb;
  // TC: a warp whose slice is empty still meets its group at every round's barrier.
  bool have = row < nrows && (TC || cb < ce);
  uint4 wr[U];
  const unsigned long long wpol = rlx_weight_policy(EVF);  // Wt streams through L2 (prelude)
#define PACKED_LOAD_BATCH()                                                                  \
  _Pragma("unroll") for (int j = 0; j < U; ++j) {                                          \
    const long long q = q0 + j * 32 + lane;                                                \
    if (q < ce) wr[j] = rlx_ld_weight(w4 + row * kv + q, wpol, EVF);                       \
  }
  // Wt is a leaf that no kernel writes: the first words go out before waiting for the previous
  // kernel (under programmatic dependent launch they overlap its tail). So do the RmsNorm's
  // gain and bias when they are leaves too (G_STATIC), into shared memory after A.
  if (have) { PACKED_LOAD_BATCH(); }
  // early_dependents: the next kernel may start now (before this one's wait), so that its own
  // loads before its wait overlap this product (LowerContext::WeightStream::launch_next_early).
#if __CUDA_ARCH__ >= 900
  if (early_dependents) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int kn = (int)k, ld = (int)ldk;  // A fits in shared memory: int indices
#if PRO == 1
  T* gs = xs + MR * ld;  // [2][k]: the gain, then the bias (HAS_PB)
#define STAGE_GAIN() \
  for (int j = threadIdx.x; j < kn; j += blockDim.x) { \
    gs[j] = pg[j]; \
    if (HAS_PB) gs[kn + j] = pb[j]; \
  }
#if G_STATIC
  STAGE_GAIN();
#endif
#endif
#if WPR > 1 && !TC
  __shared__ float red[WARPS * MR];  // each warp's slice sums
#endif
  // The next product's weight, after this one's first words: each block sends its share to L2
  // from its last warp, a lane per piece of up to 32 KB, and waits for none of it.
  if (pf_bytes > 0 && warp == WARPS - 1) {
    const long long share = ((pf_bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
    const long long p1 = min(pf_bytes, share * (blockIdx.x + 1));
    for (long long o = share * blockIdx.x + 32768ll * lane; o < p1; o += 32768ll * 32)
      rlx_prefetch_l2(pf + o, (unsigned)min(32768ll, p1 - o));
  }
  rlx_pdl_begin();
  // The epilogue's per-output operands of this warp's first row, loaded now (lane r: A row r)
  // so that finishing a row waits for none of them.
#if TC
  // Lane 4 g + t finishes columns 16 tile + g + 8 h (h = 0, 1) of A rows 2t + e (e = 0, 1):
  // accumulator 2 h + e.
  const int tg = lane >> 2, tt = lane & 3;
  float tbv[2] = {0.f, 0.f}, trv[4] = {0.f, 0.f, 0.f, 0.f};
#define PACKED_EPI_LOAD(tile)                                                             \
  if (WPR == 1 && 2 * tt < MR) {                                                          \
    _Pragma("unroll") for (int h = 0; h < 2; ++h) {                                       \
      const long long col = (tile) * 16 + tg + 8 * h;                                     \
      if (col < n) {                                                                      \
        if (HAS_BIAS) tbv[h] = to_f(bias[BIAS_SCALAR ? 0 : col]);                         \
        _Pragma("unroll") for (int e = 0; e < 2; ++e) if (HAS_RES && 2 * tt + e < MR)     \
          trv[2 * h + e] = to_f(res[(long long)(2 * tt + e) * n + col]);                   \
      }                                                                                   \
    }                                                                                     \
  }
#else
  float bv = 0.f, rv = 0.f;
#define PACKED_EPI_LOAD(col)                                   \
  if (lane < MR && (col) < n) {                                \
    if (HAS_BIAS) bv = to_f(bias[BIAS_SCALAR ? 0 : (col)]);    \
    if (HAS_RES) rv = to_f(res[(long long)lane * n + (col)]); \
  }
#endif
  PACKED_EPI_LOAD(row);
  const T zero = from_f<T>(0.f);
#ifndef VEC_A
#define VEC_A 0
#endif
  // VEC_A: K is a multiple of VW, so ldk == k (no padding) and A's rows are read as 16-byte
  // words, every load of the prologue in one round; else element by element.
#if VEC_A
  const int kw = kn / VW;
#endif
#if PRO == 1
#if !G_STATIC
  STAGE_GAIN();
#endif
  // RmsNorm: the raw rows first (and their statistic), then normalized in place below, rounded
  // to T as the norm would store them.
  __shared__ float scratch[32], inv[MR];
  float sq[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    sq[r] = 0.f;
#if VEC_A
    for (int j = threadIdx.x; j < kw; j += blockDim.x) {
      const uint4 v = __ldcg(reinterpret_cast<const uint4*>(px + (long long)r * k) + j);
      xs4[r * kw + j] = v;
      const Vec<T, VW> tv = *reinterpret_cast<const Vec<T, VW>*>(&v);
#pragma unroll
      for (int e = 0; e < VW; ++e) sq[r] = fmaf(to_f(tv.v[e]), to_f(tv.v[e]), sq[r]);
    }
#else
    for (int j = threadIdx.x; j < kn; j += blockDim.x) {
      const T v = px[(long long)r * k + j];
      xs[r * ld + j] = v;
      const float f = to_f(v);
      sq[r] += f * f;
    }
#endif
  }
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    const float q = block_sum(sq[r], scratch);  // its barriers also publish the gain and A's rows
    if (threadIdx.x == 0) inv[r] = rsqrtf(q / (float)k + eps);
  }
  __syncthreads();
#endif
#if VEC_A && PRO != 1
  for (int i = threadIdx.x; i < MR * kw; i += blockDim.x) {
    const int r = i / kw, j = i - r * kw;
#if PRO == 2
    const uint4* row2 = reinterpret_cast<const uint4*>(px + (long long)r * 2 * k);
    const uint4 w0 = __ldcg(row2 + j), w1 = __ldcg(row2 + kw + j);
    const Vec<T, VW> v0 = *reinterpret_cast<const Vec<T, VW>*>(&w0), v1 = *reinterpret_cast<const Vec<T, VW>*>(&w1);
    Vec<T, VW> o;
#pragma unroll
    for (int e = 0; e < VW; ++e) {
      const float g = to_f(GATE_FIRST ? v0.v[e] : v1.v[e]), u = to_f(GATE_FIRST ? v1.v[e] : v0.v[e]);
      o.v[e] = from_f<T>(to_f(from_f<T>(g / (1.f + expf(-g)))) * u);  // as the swiglu row kernel (silu rounded to T first)
    }
    xs4[i] = *reinterpret_cast<const uint4*>(&o);
#else
    xs4[i] = __ldcg(reinterpret_cast<const uint4*>(a + (long long)r * k) + j);
#endif
  }
#else
  for (int i = threadIdx.x; i < MR * ld; i += blockDim.x) {
    const int r = i / ld, j = i - r * ld;
    if (j >= kn) {
      xs[i] = zero;
      continue;
    }
#if PRO == 1
    float o = to_f(xs[i]) * inv[r] * to_f(gs[j]);
#if HAS_PB
    o += to_f(gs[kn + j]);
#endif
    xs[i] = from_f<T>(o);
#elif PRO == 2
    const float g0 = to_f(px[(long long)r * 2 * k + j]), g1 = to_f(px[(long long)r * 2 * k + k + j]);
    const float g = GATE_FIRST ? g0 : g1, u = GATE_FIRST ? g1 : g0;
    xs[i] = from_f<T>(to_f(from_f<T>(g / (1.f + expf(-g)))) * u);  // as the swiglu row kernel (silu rounded to T first)
#else
    xs[i] = a[(long long)r * k + j];
#endif
  }
#endif
  __syncthreads();

#if TC
  // B: A row min(g, MR - 1) at k 4t .. 4t + 3 of each tile; the slices' sums per round in
  // shared memory after A and the gain ([2 rounds][WARPS][MR][16] floats, 16-byte aligned).
  const unsigned* xb = reinterpret_cast<const unsigned*>(xs + min(tg, MR - 1) * ld + 4 * tt);
#if WPR > 1
  float* tred = reinterpret_cast<float*>(xs4 + ((MR * ld + (PRO == 1 ? 2 * kn : 0)) * (int)sizeof(T) + 15) / 16);
  int rnd = 0;
#endif
  float d[4] = {0.f, 0.f, 0.f, 0.f};
#else
  float acc[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) acc[r] = 0.f;
#endif
  while (have) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
#if TC
      const long long q = q0 + j * 32;  // the warp's tile (whole tiles: the same for every lane)
      if (q < ce) {
        const unsigned* xt = xb + (q >> 5) * 8;  // 16 elements of T per tile
        mma16816(d, reinterpret_cast<const unsigned*>(&wr[j]), xt[0], xt[1]);
      }
#else
      const long long q = q0 + j * 32 + lane;
      if (q < ce) {
        const Vec<T, VW> wv = *reinterpret_cast<const Vec<T, VW>*>(&wr[j]);
#pragma unroll
        for (int r = 0; r < MR; ++r) {
          const Vec<T, VW> xv = *reinterpret_cast<const Vec<T, VW>*>(&xs4[r * kv + q]);
#pragma unroll
          for (int v = 0; v < VW; ++v) acc[r] = fmaf(to_f(wv.v[v]), to_f(xv.v[v]), acc[r]);
        }
      }
#endif
    }
    // The next words go out before this row's sum is reduced.
    const long long cur = row;
    q0 += U * 32;
    const bool done = q0 >= ce;
    if (done) row += stride, q0 = cb;
    have = row < nrows;
    if (have) { PACKED_LOAD_BATCH(); }
#if TC
    if (done) {
#if WPR == 1
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const long long col = cur * 16 + tg + 8 * h;
          if (2 * tt + e < MR && col < n) c[(long long)(2 * tt + e) * n + col] = from_f<T>(ACT(d[2 * h + e] + tbv[h]) + trv[2 * h + e]);
        }
      PACKED_EPI_LOAD(row);
#else
      float* mine = tred + ((rnd & 1) * WARPS + warp) * (16 * MR);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (2 * tt + e < MR) mine[(2 * tt + e) * 16 + tg + 8 * h] = d[2 * h + e];
      asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(WPR * 32) : "memory");
      // The group's first warp adds the slices in order (the other buffer takes the next round,
      // whose barrier no warp passes before this warp has read this one).
      if (slice == 0)
        for (int i = lane; i < 16 * MR; i += 32) {
          const long long col = cur * 16 + (i & 15);
          if (col >= n) continue;
          const int m = i >> 4;
          float s = 0.f;
          for (int q = 0; q < WPR; ++q) s += tred[((rnd & 1) * WARPS + warp + q) * (16 * MR) + i];
          const float b = HAS_BIAS ? to_f(bias[BIAS_SCALAR ? 0 : col]) : 0.f;
          const float r = HAS_RES ? to_f(res[(long long)m * n + col]) : 0.f;
          c[(long long)m * n + col] = from_f<T>(ACT(s + b) + r);
        }
      ++rnd;
#endif
      d[0] = d[1] = d[2] = d[3] = 0.f;
    }
#else
    if (done) {
#pragma unroll
      for (int r = 0; r < MR; ++r) acc[r] = warp_sum(acc[r]);
#if WPR > 1
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < MR; ++r) red[warp * MR + r] = acc[r];
#else
      // Lane r finishes output row r with the operands it loaded, then loads the next row's.
      float v = acc[0];
#pragma unroll
      for (int r = 1; r < MR; ++r)
        if (lane == r) v = acc[r];
      if (lane < MR) c[(long long)lane * n + cur] = from_f<T>(ACT(v + bv) + rv);
      PACKED_EPI_LOAD(row);
#endif
#pragma unroll
      for (int r = 0; r < MR; ++r) acc[r] = 0.f;
    }
#endif
  }
#if WPR > 1 && !TC
  // One round: the group's first warp adds its slices in order (each warp stored its sums,
  // or nothing when its slice or row was empty).
  __syncthreads();
  const long long r0 = blockIdx.x + (long long)gridDim.x * group;
  if (slice == 0 && lane < MR && r0 < n) {
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < WPR; ++q) s += q * per < kv ? red[(warp + q) * MR + lane] : 0.f;
    c[(long long)lane * n + r0] = from_f<T>(ACT(s + bv) + rv);
  }
#endif
}
)CUDA";

// Packs rows [k0, k0 + rows) of a row-major W[K, N] (src points at row k0) into Wt[N, LDK]:
// dst[at(j, k0 + i)] = src[i * n + j], through a 32 x 33 tile of shared memory (blocks of
// 32 x 8 threads; grid: N / 32 x rows / 32). E: the element's word type. TILES 0: at(j, k) =
// j * ldk + k; 1 (2-byte elements, the tensor-core kernel): tile (j / 16, k / 16) is 512 bytes
// at ((j / 16) * ldk / 16 + k / 16) * 512, column j % 16 = g + 8 h and k % 16 = 4 t + p going
// to lane 4 g + t, element (p & 1) + 2 h + 4 (p >> 1): that lane's A fragment (gemv_packed).
inline constexpr const char* kGemvPack = R"CUDA(
__device__ __forceinline__ long long packed_at(long long j, long long k, long long ldk) {
#if TILES
  const int r = (int)(j & 15), kk = (int)(k & 15), p = kk & 3;
  const int lane = (r & 7) * 4 + (kk >> 2), e = (p & 1) | ((r >> 3) << 1) | ((p >> 1) << 2);
  return (((j >> 4) * (ldk >> 4) + (k >> 4)) * 32 + lane) * 8 + e;
#else
  return j * ldk + k;
#endif
}
extern "C" __global__ void gemv_pack(const E* __restrict__ src, E* __restrict__ dst, long long rows, long long n,
                                     long long ldk, long long k0) {
  __shared__ E tile[32][33];
  const long long j0 = (long long)blockIdx.x * 32, i0 = (long long)blockIdx.y * 32;
  for (int y = threadIdx.y; y < 32; y += 8) {
    const long long i = i0 + y, j = j0 + threadIdx.x;
    if (i < rows && j < n) tile[y][threadIdx.x] = src[i * n + j];
  }
  __syncthreads();
  for (int y = threadIdx.y; y < 32; y += 8) {
    const long long j = j0 + y, i = i0 + threadIdx.x;
    if (i < rows && j < n) dst[packed_at(j, k0 + i, ldk)] = tile[threadIdx.x][y];
  }
}
)CUDA";

}  // namespace rlx::cuda::ksrc
