#pragma once
// DequantMatMul on CUDA: y[m, n] = sum_k x[m, k] * dequant(w)[n, k], w as GGUF stores it (N rows of
// K / QE blocks of QB bytes, one row per output feature). One warp per output feature n: lane l
// takes the 32-value units l, l + 32, ... of the row (a unit is a block of the 32-value formats,
// an eighth of a 256-value superblock of the K formats), decodes them to f32 in registers and
// multiplies them with MR rows of x (rows m0 .. m0 + MR - 1 of grid.y's chunk), summed over the
// warp with shuffles. The weights stream once per chunk of MR rows (decode: once); every value is
// decoded as the CPU oracle decodes it (quant/ggml_blocks.cpp), in f32. The decode kernels write
// the products of a launch group through a table of parts (kDequantParts below).
//
// Defines: FMT (0 q4_0, 1 q4_1, 2 q5_0, 3 q5_1, 4 q8_0, 5 q2_k, 6 q3_k, 7 q4_k, 8 q5_k, 9 q6_k, 10 f16, 11 bf16),
// QE (values per block), QB (bytes per block), MR (rows per chunk), WARPS (per block), XVEC (x
// read as 16-byte vectors: its rows start on 16 bytes).
namespace rlx::cuda::ksrc {

// The outputs of one decode launch (shared by dequant_gemv, dequant_gemv_half and
// dequant_gemv_dp4a; plan::plan_dequant_gemv_groups): up to 3 products of one x ("parts"), part
// p taking the launch's output features [end[p - 1], end[p]) (end[-1] = 0; unused parts repeat
// the last end), with weight rows w[p] (row_bytes each) and result y[p] of rows of its own n.
// `res` (one part): added to the result, as a following Add of the rounded product would.
// SWIGLU (a define): two parts of one n, w[0] the gate's and w[1] the up projection's rows;
// the launch covers end[0] features and y[0] = silu(gate) * up, each product rounded to T first.
// NORM (a define): x is computed in the prologue as RmsNorm(px) * gain over rows of k, rounded
// to T as the norm step would store it (dequant_gemv / dequant_gemv_half: into shared memory).
inline constexpr const char* kDequantParts = R"CUDA(
#ifndef SWIGLU
#define SWIGLU 0
#endif
#ifndef NORM
#define NORM 0
#endif
struct DqParts {
  const unsigned char* w[3];
  T* y[3];
  long long end[3];
  const T* res;
};
// Part of output feature `col` (< end[2]); *j: the feature's index in its part, *n: the part's
// feature count.
__device__ __forceinline__ int dq_part(const DqParts& o, long long col, long long* j, long long* n) {
  const int p = col < o.end[0] ? 0 : col < o.end[1] ? 1 : 2;
  const long long first = p == 0 ? 0 : p == 1 ? o.end[0] : o.end[1];
  *j = col - first;
  *n = (p == 0 ? o.end[0] : p == 1 ? o.end[1] : o.end[2]) - first;
  return p;
}
// Entry p of a part table, chosen without indexing (an indexed kernel parameter is copied to
// local memory first).
template <class P>
__device__ __forceinline__ P dq_pick(const P (&a)[3], int p) {
  return p == 0 ? a[0] : p == 1 ? a[1] : a[2];
}
__device__ __forceinline__ long long dq_features(const DqParts& o) { return SWIGLU ? o.end[0] : o.end[2]; }
// Lane 0 stores rows m0 + r < m of feature j (of n) of part p, from the warp sums of the lane
// partials acc (and, with SWIGLU, acc2 of the up projection).
template <int R>
__device__ __forceinline__ void dq_store(const float (&acc)[R], const float (&acc2)[R], const DqParts& o, int p,
                                         long long j, long long n, long long m0, long long m, int lane) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s = warp_sum(acc[r]);
#if SWIGLU
    const float g = to_f(from_f<T>(s));
    s = g / (1.0f + expf(-g)) * to_f(from_f<T>(warp_sum(acc2[r])));
#endif
    const long long i = (m0 + r) * n + j;
    if (lane == 0 && m0 + r < m) {
      if (o.res) s = to_f(from_f<T>(s)) + to_f(o.res[i]);
      dq_pick(o.y, p)[i] = from_f<T>(s);
    }
  }
}
// Before the programmatic-launch wait: weight row `row` (row_bytes) into L2, a line a lane (the
// weights are leaves that no kernel writes; a prefetch is only a hint either way).
__device__ __forceinline__ void dq_prefetch_row(const unsigned char* row, long long row_bytes, int lane) {
  for (long long off = (long long)lane * 128; off < row_bytes; off += 32 * 128) rlx_prefetch_line_l2(row + off);
}
// The warp's weight row(s) of feature `col` into L2 (when it has one), then the wait.
__device__ __forceinline__ void dq_prefetch_then_wait(const DqParts& o, long long col, long long row_bytes, int lane) {
  if (col < dq_features(o)) {
    long long j, n;
    const int p = dq_part(o, col, &j, &n);
    dq_prefetch_row(dq_pick(o.w, p) + j * row_bytes, row_bytes, lane);
#if SWIGLU
    dq_prefetch_row(o.w[1] + j * row_bytes, row_bytes, lane);
#endif
  }
  rlx_pdl_begin();
}
// NORM: rows 0 .. m - 1 of RmsNorm(px) * gain (rows of k) into xs (f32 values of T), by the
// whole block; every thread calls it.
__device__ __forceinline__ void dq_norm_rows(const T* __restrict__ px, const T* __restrict__ gain, float eps,
                                             long long m, long long k, float* __restrict__ xs) {
  __shared__ float scratch[32];
  for (long long r = 0; r < m; ++r) {
    float q = 0.0f;
#pragma unroll 4
    for (long long j = threadIdx.x; j < k; j += blockDim.x) {
      const float f = to_f(px[r * k + j]);
      q = fmaf(f, f, q);
    }
    const float inv = rsqrtf(block_sum(q, scratch) / (float)k + eps);
#pragma unroll 4
    for (long long j = threadIdx.x; j < k; j += blockDim.x)
      xs[r * k + j] = to_f(from_f<T>(to_f(px[r * k + j]) * inv * to_f(gain[j])));
  }
  __syncthreads();
}
#if NORM
extern __shared__ __align__(16) float dq_xs[];  // the normalized rows (dynamic shared memory)
#endif
// The start of dequant_gemv / dequant_gemv_half, every thread: the weight prefetch and the wait,
// then with NORM the normalized rows of x; returns them (null without NORM).
__device__ __forceinline__ const float* dq_begin(const DqParts& o, long long col, long long row_bytes, int lane,
                                                 const T* __restrict__ x, const T* __restrict__ gain, float eps,
                                                 long long m, long long k) {
  dq_prefetch_then_wait(o, col, row_bytes, lane);
#if NORM
  dq_norm_rows(x, gain, eps, m, k, dq_xs);
  return dq_xs;
#else
  (void)x, (void)gain, (void)eps, (void)m, (void)k;
  return nullptr;
#endif
}
// s + sum_j v[j] * xs[j] over N f32 values of shared memory (16-byte aligned).
template <int N>
__device__ __forceinline__ float dq_dot_s(const float (&v)[N], const float* xs, float s) {
#pragma unroll
  for (int c = 0; c < N / 4; ++c) {
    const float4 q = reinterpret_cast<const float4*>(xs)[c];
    s = fmaf(v[4 * c], q.x, s);
    s = fmaf(v[4 * c + 1], q.y, s);
    s = fmaf(v[4 * c + 2], q.z, s);
    s = fmaf(v[4 * c + 3], q.w, s);
  }
  return s;
}
)CUDA";

inline constexpr const char* kDequantGemv = R"CUDA(
__device__ __forceinline__ float dq_h(const unsigned char* p) {
  const unsigned short h = (unsigned short)(p[0] | (p[1] << 8));
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned dq_u32(const unsigned char* p) {
  return (unsigned)p[0] | ((unsigned)p[1] << 8) | ((unsigned)p[2] << 16) | ((unsigned)p[3] << 24);
}
// 4-bit value j of a 32-value block: low nibbles hold values 0..15, high nibbles 16..31.
__device__ __forceinline__ int dq_nib(const unsigned char* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }
__device__ __forceinline__ int dq_two_bits(const unsigned char* qs, int i) {
  const int c = i / 128, s = (i % 128) / 32, l = i % 32;
  return (qs[32 * c + l] >> (2 * s)) & 3;
}

// Values i0 .. i0 + 31 of block b (i0 a multiple of 32) into y.
__device__ __forceinline__ void dq_unit(const unsigned char* b, int i0, float (&y)[32]) {
#if FMT == 0
  const float d = dq_h(b);
#pragma unroll
  for (int j = 0; j < 32; ++j) y[j] = d * (float)(dq_nib(b + 2, j) - 8);
#elif FMT == 1
  const float d = dq_h(b), m = dq_h(b + 2);
#pragma unroll
  for (int j = 0; j < 32; ++j) y[j] = d * (float)dq_nib(b + 4, j) + m;
#elif FMT == 2
  const float d = dq_h(b);
  const unsigned qh = dq_u32(b + 2);
#pragma unroll
  for (int j = 0; j < 32; ++j) y[j] = d * (float)((dq_nib(b + 6, j) | (int)((qh >> j) & 1) << 4) - 16);
#elif FMT == 3
  const float d = dq_h(b), m = dq_h(b + 2);
  const unsigned qh = dq_u32(b + 4);
#pragma unroll
  for (int j = 0; j < 32; ++j) y[j] = d * (float)(dq_nib(b + 8, j) | (int)((qh >> j) & 1) << 4) + m;
#elif FMT == 4
  const float d = dq_h(b);
#pragma unroll
  for (int j = 0; j < 32; ++j) y[j] = d * (float)(signed char)b[2 + j];
#elif FMT == 5  // q2_k: scales[16] (low nibble scale, high nibble min), qs[64] at 16, d at 80, dmin at 82
  const float d = dq_h(b + 80), dmin = dq_h(b + 82);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int i = i0 + j;
    const unsigned char sc = b[i / 16];
    y[j] = d * (float)(sc & 0xF) * (float)dq_two_bits(b + 16, i) - dmin * (float)(sc >> 4);
  }
#elif FMT == 6  // q3_k: hmask[32], qs[64] at 32, 6-bit scales at 96, d at 108
  const float d = dq_h(b + 108);
  const unsigned char* sc = b + 96;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int i = i0 + j, s = i / 16;
    const int low = (sc[s % 8] >> (s < 8 ? 0 : 4)) & 0xF;
    const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    const int q = dq_two_bits(b + 32, i) - (((b[i % 32] >> (i / 32)) & 1) ? 0 : 4);
    y[j] = d * (float)((low | high << 4) - 32) * (float)q;
  }
#elif FMT == 7 || FMT == 8  // q4_k / q5_k: d, dmin, 6-bit scales and mins at 4, (qh[32] at 16,) qs
  const float d = dq_h(b), dmin = dq_h(b + 2);
  const unsigned char* s6 = b + 4;
  const int s = i0 / 32;  // the unit is sub-block s
  int sc, mn;
  if (s < 4) {
    sc = s6[s] & 63;
    mn = s6[s + 4] & 63;
  } else {
    sc = (s6[s + 4] & 0xF) | ((s6[s - 4] >> 6) << 4);
    mn = (s6[s + 4] >> 4) | ((s6[s] >> 6) << 4);
  }
  const float step = d * (float)sc, off = dmin * (float)mn;
  const unsigned char* qs = b + (FMT == 8 ? 48 : 16) + 32 * (s / 2);
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    int q = (s % 2) ? qs[l] >> 4 : qs[l] & 0xF;
#if FMT == 8
    q |= ((b[16 + l] >> s) & 1) << 4;
#endif
    y[l] = step * (float)q - off;
  }
#elif FMT == 10  // f16: 32 plain values
#pragma unroll
  for (int j = 0; j < 32; ++j) y[j] = dq_h(b + 2 * j);
#elif FMT == 11  // bf16: 32 plain values (the high half of an f32)
#pragma unroll
  for (int j = 0; j < 32; ++j) y[j] = __uint_as_float((unsigned)(b[2 * j] | (b[2 * j + 1] << 8)) << 16);
#else  // q6_k: ql[128], qh[64] at 128, int8 scales[16] at 192, d at 208; value i = 128h + 32k + l
  const float d = dq_h(b + 208);
  const int h = i0 / 128, k = (i0 % 128) / 32;
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const int ql = 64 * h + l + 32 * (k & 1), qh = 32 * h + l, scale = 8 * h + l / 16 + 2 * k;
    const int q = ((b[ql] >> (4 * (k >> 1))) & 0xF) | (((b[128 + qh] >> (2 * k)) & 3) << 4);
    y[l] = d * (float)(signed char)b[192 + scale] * (float)(q - 32);
  }
#endif
}

// s + sum_j v[j] * x[j] over N values of x (N a multiple of 16 bytes of T when XVEC: read as
// 16-byte vectors, the row starting on 16 bytes).
template <int N>
__device__ __forceinline__ float dq_dot_x(const float (&v)[N], const T* __restrict__ xr, float s) {
#if XVEC
  constexpr int XW = 16 / (int)sizeof(T);
#pragma unroll
  for (int c = 0; c < N / XW; ++c) {
    const Vec<T, XW> xv = reinterpret_cast<const Vec<T, XW>*>(xr)[c];
#pragma unroll
    for (int e = 0; e < XW; ++e) s = fmaf(v[c * XW + e], to_f(xv.v[e]), s);
  }
#else
#pragma unroll
  for (int j = 0; j < N; ++j) s = fmaf(v[j], to_f(xr[j]), s);
#endif
  return s;
}

// s + sum_j v[j] * x[j] over N values of row piece `off` of x, or with NORM of xs (the
// normalized rows in shared memory).
template <int N>
__device__ __forceinline__ float dq_dot(const float (&v)[N], const T* __restrict__ x, const float* xs, long long off,
                                        float s) {
#if NORM
  return dq_dot_s(v, xs + off, s);
#else
  return dq_dot_x(v, x + off, s);
#endif
}

// acc[r] += the lane's part of row m0 + r of x (r < MR, m0 + r < m) times weight row `row`.
__device__ __forceinline__ void dq_row_acc(const unsigned char* __restrict__ row, const T* __restrict__ x,
                                           const float* xs, long long m0, long long m, long long k, int lane,
                                           float (&acc)[MR]) {
  const long long units = k / 32;
  for (long long u = lane; u < units; u += 32) {
    float v[32];
    dq_unit(row + (u * 32 / QE) * QB, (int)((u * 32) % QE), v);
#pragma unroll
    for (int r = 0; r < MR; ++r) {
      if (m0 + r >= m) break;
      acc[r] += dq_dot(v, x, xs, (m0 + r) * k + u * 32, 0.0f);
    }
  }
}

// grid.x: blocks of WARPS output features (of the DqParts); grid.y: chunks of MR rows of x
// (one chunk with NORM: the normalized rows, m x k floats, are the dynamic shared memory).
extern "C" __global__ void __launch_bounds__(WARPS * 32) dequant_gemv(const T* __restrict__ x, const DqParts o,
                                                                      long long m, long long k, long long row_bytes,
                                                                      const T* __restrict__ gain, float eps) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long m0 = (long long)blockIdx.y * MR;
  const long long col = (long long)blockIdx.x * WARPS + warp;
  const float* xs = dq_begin(o, col, row_bytes, lane, x, gain, eps, m, k);
  if (col >= dq_features(o)) return;  // the whole warp
  long long j, n;
  const int p = dq_part(o, col, &j, &n);
  float acc[MR], acc2[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) acc[r] = acc2[r] = 0.0f;
  dq_row_acc(dq_pick(o.w, p) + j * row_bytes, x, xs, m0, m, k, lane, acc);
#if SWIGLU
  dq_row_acc(o.w[1] + j * row_bytes, x, xs, m0, m, k, lane, acc2);
#endif
  dq_store(acc, acc2, o, p, j, n, m0, m, lane);
}
)CUDA";

// Decode with the 16-bit float formats (FMT 10 f16 / 11 bf16; at most MR rows of x): one warp
// per output feature, lane l reading 16-byte words l, l + 32, ... of the row (8 values each,
// coalesced, streamed past L1 with L2 evict-first), 4 words in flight per lane; x as 16-byte
// vectors (XVEC) or values. Needs the row and the weight pointer 16-byte aligned. Appended to
// kDequantGemv.
inline constexpr const char* kDequantGemvHalf = R"CUDA(
__device__ __forceinline__ void dq_half8(const uint4 q, float (&v)[8]) {
  const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#if FMT == 11
    v[2 * i] = __uint_as_float(u[i] << 16);
    v[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
#else
    const unsigned short lo = (unsigned short)(u[i] & 0xFFFFu), hi = (unsigned short)(u[i] >> 16);
    asm("cvt.f32.f16 %0, %1;" : "=f"(v[2 * i]) : "h"(lo));
    asm("cvt.f32.f16 %0, %1;" : "=f"(v[2 * i + 1]) : "h"(hi));
#endif
  }
}
// acc[r] += the lane's part of row r < m of x times the 16-bit weight row `row` (16-byte words).
__device__ __forceinline__ void dq_half_row_acc(const uint4* __restrict__ row, const T* __restrict__ x, const float* xs,
                                                long long m, long long k, int lane, unsigned long long policy,
                                                float (&acc)[MR]) {
  const long long words = k / 8;
#pragma unroll 4
  for (long long c = lane; c < words; c += 32) {
    float v[8];
    dq_half8(rlx_ld_stream(row + c, policy), v);
#pragma unroll
    for (int r = 0; r < MR; ++r) {
      if (r >= m) break;
      acc[r] = dq_dot(v, x, xs, r * k + c * 8, acc[r]);
    }
  }
}
extern "C" __global__ void __launch_bounds__(WARPS * 32) dequant_gemv_half(const T* __restrict__ x, const DqParts o,
                                                                           long long m, long long k, long long row_bytes,
                                                                           const T* __restrict__ gain, float eps) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long col = (long long)blockIdx.x * WARPS + warp;
  const float* xs = dq_begin(o, col, row_bytes, lane, x, gain, eps, m, k);
  if (col >= dq_features(o)) return;  // the whole warp
  long long j, n;
  const int p = dq_part(o, col, &j, &n);
  const unsigned long long policy = rlx_evict_first_policy();
  float acc[MR], acc2[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) acc[r] = acc2[r] = 0.0f;
  dq_half_row_acc(reinterpret_cast<const uint4*>(dq_pick(o.w, p) + j * row_bytes), x, xs, m, k, lane, policy, acc);
#if SWIGLU
  dq_half_row_acc(reinterpret_cast<const uint4*>(o.w[1] + j * row_bytes), x, xs, m, k, lane, policy, acc2);
#endif
  dq_store(acc, acc2, o, p, j, n, 0, m, lane);
}
)CUDA";

// The prefill path (lower_dequant.cpp): weight rows n0 .. n0 + rows - 1 decoded into a dense
// [rows, k] buffer of OT (f32 for f32 x, else x's 16-bit type; OUT_F32 says which), one 32-value
// unit per thread (dq_unit above), stored as 16-byte words. Appended to kDequantGemv (MR, WARPS,
// XVEC unused).
inline constexpr const char* kDequantRows = R"CUDA(
extern "C" __global__ void __launch_bounds__(256) dequant_rows(const unsigned char* __restrict__ w,
                                                               OT* __restrict__ out, long long n0, long long rows,
                                                               long long k, long long row_bytes) {
  const long long units = k / 32;
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= rows * units) return;
  const long long r = t / units, u = t % units;
  float v[32];
  dq_unit(w + (n0 + r) * row_bytes + (u * 32 / QE) * QB, (int)((u * 32) % QE), v);
#if OUT_F32
  float4* o = reinterpret_cast<float4*>(out + r * k + u * 32);
#pragma unroll
  for (int c = 0; c < 8; ++c) o[c] = make_float4(v[4 * c], v[4 * c + 1], v[4 * c + 2], v[4 * c + 3]);
#else
  union { OT h[8]; uint4 q; } p;
  uint4* o = reinterpret_cast<uint4*>(out + r * k + u * 32);
#pragma unroll
  for (int c = 0; c < 4; ++c) {
#pragma unroll
    for (int e = 0; e < 8; ++e) p.h[e] = from_f<OT>(v[8 * c + e]);
    o[c] = p.q;
  }
#endif
}
)CUDA";

}  // namespace rlx::cuda::ksrc
