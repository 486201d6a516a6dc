#pragma once
// Skinny GEMM (MR <= 4 rows, e.g. decode): C[MR, N] = epi(A[MR, K] @ W[K, N]), W row-major.
// GEMM libraries tile M by 64+ rows and leave most of the GPU idle when M is 1; this kernel
// streams W once with 16-byte loads (U = four or eight independent loads in flight per thread;
// LPR lanes cover one row of the block's TILE columns, so a warp load covers 32 / LPR rows), splits K
// across blocks to fill every SM, and reduces the splits inside the same launch: every block
// writes its f32 partial, and the last block to finish a column tile (counted with an atomic
// ticket that it resets for the next run) sums the tile's partials and applies the epilogue:
//   c = ACT(acc + bias) + residual   (each part optional, chosen by macros)
// A prologue may compute A itself from the producer step it absorbed (PRO, see lower.h):
//   PRO 1: A = RmsNorm(px) * pg (+ pb) over rows of k (eps), rounded to T as the norm would store it
//   PRO 2: A = FusedSwiGLU(px) with px rows of 2k (GATE_FIRST)
// Compiled per (T, B = bias type, MR, VW = elements per 16 bytes, LPR, TPO = threads per output
// of the split reduction, W_STATIC = W is a param/constant, L2PF = prefetch the block's later W
// rows into L2 before waiting, STAGE = the RmsNorm prologue keeps A's rows in shared memory,
// HAS_BIAS, BIAS_SCALAR, ACT, HAS_RES, PRO, HAS_PB, GATE_FIRST).
namespace rlx::cuda::ksrc {

inline constexpr const char* kGemv = R"CUDA(
#define WARPS 8
#define RPI (32 / LPR)           // W rows one warp load covers (LPR lanes per row)
#define TILE (LPR * VW)          // columns per block
#define ROWS_PER_LOAD (WARPS * RPI)

__device__ __forceinline__ float gemv_epilogue(float v, const B* bias, const T* res, long long r, long long col,
                                               long long n) {
#if HAS_BIAS
  v += to_f(bias[BIAS_SCALAR ? 0 : col]);
#endif
  v = ACT(v);
#if HAS_RES
  v += to_f(res[r * n + col]);
#endif
  return v;
}

__device__ __forceinline__ void gemv_fma(float (&acc)[MR][VW], const uint4& raw, const float* xs, int kk,
                                         long long kchunk) {
  const Vec<T, VW> wv = *reinterpret_cast<const Vec<T, VW>*>(&raw);
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    const float x = xs[r * kchunk + kk];
#pragma unroll
    for (int v = 0; v < VW; ++v) acc[r][v] = fmaf(x, to_f(wv.v[v]), acc[r][v]);
  }
}

// U: W rows in flight per thread (8, or 4 from 16 accumulators on); registers for 4 resident
// blocks per multiprocessor (3 from 32 accumulators on).
#define U (MR * VW >= 16 ? 4 : 8)
#define MIN_BLOCKS (MR * VW >= 32 ? 3 : 4)
// grid.x: column tiles of TILE; grid.y: K splits of kchunk rows. Dynamic shared memory:
// max(MR * (kchunk + (STAGE ? k : 0)), WARPS * MR * TILE) floats. part: [splits][MR][n] f32 (splits > 1 only);
// tickets: one zero-initialized counter per column tile.
extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS) gemv(const T* __restrict__ a, const T* __restrict__ w,
                                                       const B* __restrict__ bias, const T* __restrict__ res,
                                                       T* __restrict__ c, float* __restrict__ part,
                                                       unsigned* __restrict__ tickets, long long k, long long n,
                                                       long long kchunk, const T* __restrict__ px,
                                                       const T* __restrict__ pg, const T* __restrict__ pb, float eps) {
  extern __shared__ float smem[];
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / LPR, cl = lane % LPR;  // row of the warp's load group, lane within the row
  const long long k0 = (long long)blockIdx.y * kchunk, k1 = min(k, k0 + kchunk);
  const int kn = (int)(k1 - k0);
  const long long col = (long long)blockIdx.x * TILE + (long long)cl * VW;
  const bool active = col < n;
  int kk = warp * RPI + sub;  // this thread's first row of the split
  const uint4* wp = reinterpret_cast<const uint4*>(w + (k0 + kk) * n + col);
  const long long step = ROWS_PER_LOAD * n / VW;  // uint4s between rows kk and kk + ROWS_PER_LOAD
  // Each thread loads U rows at a time (predicated at the end of the split), all in flight
  // together. A W that no kernel writes (W_STATIC: a param or constant) does not depend on the
  // previous kernel: the first U are issued before waiting for it (under programmatic dependent
  // launch they overlap its tail).
  uint4 wr[U];
  const unsigned long long wpol = rlx_weight_policy(EVF);  // W streams through L2 (prelude)
#define GEMV_LOAD_BATCH()                                                                 \
  do {                                                                                    \
    _Pragma("unroll") for (int j = 0; j < U; ++j) if (kk + j * ROWS_PER_LOAD < kn) wr[j] = \
        rlx_ld_weight(wp + j * step, wpol, EVF);                                          \
  } while (0)
#if W_STATIC
  if (active) GEMV_LOAD_BATCH();
#endif
#if L2PF && W_STATIC
  // And the rest of this thread's rows are prefetched into L2 (one request per 128 bytes).
  if (active && (cl * VW * (int)sizeof(T)) % 128 == 0)
    for (int j = kk + U * ROWS_PER_LOAD; j < kn; j += ROWS_PER_LOAD)
      rlx_prefetch_line_l2(w + (k0 + j) * n + col);
#endif
  rlx_pdl_begin();
#if !W_STATIC
  if (active) GEMV_LOAD_BATCH();
#endif
  float* xs = smem;  // this split's slice of A, as f32: [MR][kchunk]
#if PRO == 1
  // The whole row's statistic, in every block. STAGE: the rows are kept in shared memory
  // ([MR][k] after xs) so the slice is not read again after the sum.
  __shared__ float scratch[32], inv[MR];
#if STAGE
  float* rows = smem + MR * kchunk;
#endif
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    float q = 0.f;
    for (long long j = threadIdx.x; j < k; j += blockDim.x) {
      const float v = to_f(px[r * k + j]);
#if STAGE
      rows[r * k + j] = v;
#endif
      q += v * v;
    }
    q = block_sum(q, scratch);
    if (threadIdx.x == 0) inv[r] = rsqrtf(q / (float)k + eps);
  }
  __syncthreads();
#endif
  for (int i = threadIdx.x; i < MR * kn; i += blockDim.x) {
    const int r = i / kn, kx = i - r * kn;
    const long long j = k0 + kx;
#if PRO == 1
#if STAGE
    float o = rows[r * k + j] * inv[r] * to_f(pg[j]);
#else
    float o = to_f(px[r * k + j]) * inv[r] * to_f(pg[j]);
#endif
#if HAS_PB
    o += to_f(pb[j]);
#endif
    xs[r * kchunk + kx] = to_f(from_f<T>(o));
#elif PRO == 2
    const float g0 = to_f(px[r * 2 * k + j]), g1 = to_f(px[r * 2 * k + k + j]);
    const float g = GATE_FIRST ? g0 : g1, u = GATE_FIRST ? g1 : g0;
    const float o = to_f(from_f<T>(g / (1.f + expf(-g)))) * u;  // as the swiglu row kernel (silu rounded to T first)
    xs[r * kchunk + kx] = to_f(from_f<T>(o));
#else
    xs[r * kchunk + kx] = to_f(a[r * k + j]);
#endif
  }
  __syncthreads();

  float acc[MR][VW];
#pragma unroll
  for (int r = 0; r < MR; ++r)
#pragma unroll
    for (int v = 0; v < VW; ++v) acc[r][v] = 0.f;
  if (active)
    for (;;) {
#pragma unroll
      for (int j = 0; j < U; ++j)
        if (kk + j * ROWS_PER_LOAD < kn) gemv_fma(acc, wr[j], xs, kk + j * ROWS_PER_LOAD, kchunk);
      kk += U * ROWS_PER_LOAD;
      wp += U * step;
      if (kk >= kn) break;
      GEMV_LOAD_BATCH();
    }
  // The warp's row groups hold the same columns: add them across lanes (fixed order).
#pragma unroll
  for (int o = LPR; o < 32; o <<= 1)
#pragma unroll
    for (int r = 0; r < MR; ++r)
#pragma unroll
      for (int v = 0; v < VW; ++v) acc[r][v] += __shfl_xor_sync(0xffffffffu, acc[r][v], o);
  __syncthreads();  // xs is dead: its space now holds the warps' sums
  float* red = smem;  // [WARPS][MR][TILE]
  if (sub == 0)
#pragma unroll
    for (int r = 0; r < MR; ++r)
#pragma unroll
      for (int v = 0; v < VW; v += 4)
        *reinterpret_cast<float4*>(&red[(warp * MR + r) * TILE + cl * VW + v]) =
            make_float4(acc[r][v], acc[r][v + 1], acc[r][v + 2], acc[r][v + 3]);
  __syncthreads();
  // Thread i sums element i = r * TILE + t of the tile over the warps (t: consecutive columns).
  const bool split = gridDim.y > 1;
  for (int i = threadIdx.x; i < MR * TILE; i += blockDim.x) {
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < WARPS; ++q) s += red[q * MR * TILE + i];
    const int r = i / TILE;
    const long long cc = (long long)blockIdx.x * TILE + (i - r * TILE);
    if (cc >= n) continue;
    if (split) part[((long long)blockIdx.y * MR + r) * n + cc] = s;
    else c[r * n + cc] = from_f<T>(gemv_epilogue(s, bias, res, r, cc, n));
  }
  if (!split) return;
  __threadfence();  // this block's partials are visible device-wide before its ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&tickets[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The last block adds the splits' partials: TPO consecutive threads per output, each over
  // every TPO-th split with several loads in flight, then across the TPO lanes (fixed order).
  constexpr int OUTS = MR * TILE;  // TPO (a power of two <= 32, TPO * OUTS <= 256) is a macro
  const unsigned splits = gridDim.y;
  for (int base = 0; base < OUTS * TPO; base += blockDim.x) {
    const int i = base + threadIdx.x, o = i / TPO, g = i % TPO;
    const int r = o / TILE;
    const long long cc = (long long)blockIdx.x * TILE + (o - r * TILE);
    float s = 0.f;
    if (o < OUTS && cc < n) {
      const float* pp = part + (long long)r * n + cc;
#pragma unroll 4
      for (unsigned p = g; p < splits; p += TPO) s += __ldcg(pp + (long long)p * MR * n);
    }
#pragma unroll
    for (int x = 1; x < TPO; x <<= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
    if (g == 0 && o < OUTS && cc < n) c[r * n + cc] = from_f<T>(gemv_epilogue(s, bias, res, r, cc, n));
  }
  if (threadIdx.x == 0) tickets[blockIdx.x] = 0u;  // ready for the next run (or graph replay)
}
)CUDA";

}  // namespace rlx::cuda::ksrc
