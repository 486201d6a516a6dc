#pragma once
// DequantMatMul decode on CUDA with integer dot products: x is quantized once per call to 8-bit
// blocks of 32 values (scale d = max|x| / 127 and the block's d * sum(q)), then every lane takes
// whole weight blocks (or fixed parts of a superblock), loads their quant bytes as 32-bit words
// and multiplies 4 values per instruction with __dp4a. Block scales, Q4_0's offset of 8 and the
// K-quant mins are applied in f32 with the x block sums. Weights stream once for up to MR rows.
//
// Kernels:
//   quantize_x_q8: x (m, k) of T -> xq (m, k) int8, xds (m, k / 32) float2 (d, d * sum q). A block
//     holding a NaN or an infinity gets d = NaN, so its products are NaN (never a silent number).
//     With NORM, x is first RmsNorm(x) * gain over rows of k (eps), rounded to T.
//   dequant_gemv_dp4a: grid.x blocks of WARPS output features (one warp each) of the DqParts
//     (kernels/dequant.h: kDequantParts, prepended), grid.y chunks of MR rows.
// Defines: FMT (0 q4_0, 4 q8_0, 7 q4_k, 9 q6_k), QE / QB (values / bytes per block), UPB (lane
// tasks per block), MR, WARPS. Quant bytes are read as 16-bit halves (Q4_0, Q8_0, Q6_K blocks
// are only 2-byte aligned); Q4_K (144-byte blocks) as 32-bit words.
namespace rlx::cuda::ksrc {

inline constexpr const char* kQuantizeXQ8 = R"CUDA(
extern "C" __global__ void __launch_bounds__(256) quantize_x_q8(const T* __restrict__ x, signed char* __restrict__ xq,
                                                                float2* __restrict__ xds, long long blocks,
                                                                const T* __restrict__ gain, long long k, float eps) {
  const int lane = threadIdx.x & 31;
  const long long b = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
  rlx_pdl_begin();
  if (b >= blocks) return;  // the whole warp
#if NORM
  // The block's row of x normalized (RmsNorm * gain, rounded to T as the norm would store it):
  // the warp sums the row's squares itself.
  const long long row = b * 32 / k;
  float q2 = 0.0f;
#pragma unroll 8
  for (long long j = lane; j < k; j += 32) {
    const float f = to_f(x[row * k + j]);
    q2 = fmaf(f, f, q2);
  }
  const float inv = rsqrtf(warp_sum(q2) / (float)k + eps);
  const float v = to_f(from_f<T>(to_f(x[b * 32 + lane]) * inv * to_f(gain[(b * 32 + lane) - row * k])));
#else
  const float v = to_f(x[b * 32 + lane]);
#endif
  float a = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
  const bool bad = __any_sync(0xffffffffu, !isfinite(v));
  const float d = a / 127.0f;
  const int q = (d == 0.0f || bad) ? 0 : __float2int_rn(v / d);
  xq[b * 32 + lane] = (signed char)q;
  int s = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) xds[b] = bad ? make_float2(__int_as_float(0x7fffffff), __int_as_float(0x7fffffff)) : make_float2(d, d * (float)s);
}
)CUDA";

inline constexpr const char* kDequantGemvDp4a = R"CUDA(
__device__ __forceinline__ float dq_half(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
// The 32-bit word at 2-byte aligned p.
__device__ __forceinline__ int dq_w16(const unsigned short* p) { return (int)((unsigned)p[0] | ((unsigned)p[1] << 16)); }

// acc[r] += this task's part of row r's dot product. blk: the weight block; u: the task in it;
// xq / xds: row m0's quantized x at the block's first value and first 32-value scale.
__device__ __forceinline__ void dq_task(const unsigned char* __restrict__ blk, int u, const signed char* __restrict__ xq,
                                        const float2* __restrict__ xds, long long k, long long m_left, float (&acc)[MR]) {
#if FMT == 0  // q4_0: d, qs[16]; value j: low nibble of qs[j] (j < 16), high nibble of qs[j - 16]
  const unsigned short* p = (const unsigned short*)blk;
  const float d = dq_half(p[0]);
  int w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = dq_w16(p + 1 + 2 * i);
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    if (r >= m_left) break;
    const int4 a = *(const int4*)(xq + r * k), b = *(const int4*)(xq + r * k + 16);
    int s = __dp4a(w[0] & 0x0F0F0F0F, a.x, 0);
    s = __dp4a(w[1] & 0x0F0F0F0F, a.y, s);
    s = __dp4a(w[2] & 0x0F0F0F0F, a.z, s);
    s = __dp4a(w[3] & 0x0F0F0F0F, a.w, s);
    s = __dp4a((w[0] >> 4) & 0x0F0F0F0F, b.x, s);
    s = __dp4a((w[1] >> 4) & 0x0F0F0F0F, b.y, s);
    s = __dp4a((w[2] >> 4) & 0x0F0F0F0F, b.z, s);
    s = __dp4a((w[3] >> 4) & 0x0F0F0F0F, b.w, s);
    const float2 ds = xds[r * (k / 32)];
    acc[r] += d * (ds.x * (float)s - 8.0f * ds.y);
  }
#elif FMT == 4  // q8_0: d, qs[32] int8
  const unsigned short* p = (const unsigned short*)blk;
  const float d = dq_half(p[0]);
  int w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = dq_w16(p + 1 + 2 * i);
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    if (r >= m_left) break;
    const int4 a = *(const int4*)(xq + r * k), b = *(const int4*)(xq + r * k + 16);
    int s = __dp4a(w[0], a.x, 0);
    s = __dp4a(w[1], a.y, s);
    s = __dp4a(w[2], a.z, s);
    s = __dp4a(w[3], a.w, s);
    s = __dp4a(w[4], b.x, s);
    s = __dp4a(w[5], b.y, s);
    s = __dp4a(w[6], b.z, s);
    s = __dp4a(w[7], b.w, s);
    acc[r] += d * xds[r * (k / 32)].x * (float)s;
  }
#elif FMT == 7  // q4_k: d, dmin, 6-bit scales/mins[12], qs[128]; task u: sub-blocks 2u (low nibbles), 2u + 1 (high)
  const unsigned* p = (const unsigned*)blk;
  const unsigned short* h = (const unsigned short*)blk;
  const float d = dq_half(h[0]), dmin = dq_half(h[1]);
  const unsigned char* s6 = blk + 4;
  int sc[2], mn[2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int s = 2 * u + t;
    if (s < 4) {
      sc[t] = s6[s] & 63;
      mn[t] = s6[s + 4] & 63;
    } else {
      sc[t] = (s6[s + 4] & 0xF) | ((s6[s - 4] >> 6) << 4);
      mn[t] = (s6[s + 4] >> 4) | ((s6[s] >> 6) << 4);
    }
  }
  int w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = (int)p[4 + 8 * u + i];
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    if (r >= m_left) break;
    const int4* xa = (const int4*)(xq + r * k + 64 * u);
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int4 a = xa[c], b = xa[2 + c];
      s0 = __dp4a(w[4 * c + 0] & 0x0F0F0F0F, a.x, s0);
      s0 = __dp4a(w[4 * c + 1] & 0x0F0F0F0F, a.y, s0);
      s0 = __dp4a(w[4 * c + 2] & 0x0F0F0F0F, a.z, s0);
      s0 = __dp4a(w[4 * c + 3] & 0x0F0F0F0F, a.w, s0);
      s1 = __dp4a((w[4 * c + 0] >> 4) & 0x0F0F0F0F, b.x, s1);
      s1 = __dp4a((w[4 * c + 1] >> 4) & 0x0F0F0F0F, b.y, s1);
      s1 = __dp4a((w[4 * c + 2] >> 4) & 0x0F0F0F0F, b.z, s1);
      s1 = __dp4a((w[4 * c + 3] >> 4) & 0x0F0F0F0F, b.w, s1);
    }
    const float2 e0 = xds[r * (k / 32) + 2 * u], e1 = xds[r * (k / 32) + 2 * u + 1];
    acc[r] += d * (e0.x * (float)(sc[0] * s0) + e1.x * (float)(sc[1] * s1)) -
              dmin * ((float)mn[0] * e0.y + (float)mn[1] * e1.y);
  }
#else  // q6_k: ql[128], qh[64] at 128, int8 scales[16] at 192, d at 208; task u = 4 h + c: values
       // 128 h + 32 c + l, l < 32, of 6 bits: low 4 from ql[64 h + 32 (c & 1) + l] >> 4 (c >> 1),
       // high 2 from qh[32 h + l] >> 2 c; minus 32; scales[8 h + 2 c] (l < 16), [8 h + 2 c + 1]
  const int hh = u >> 2, c = u & 3;
  const unsigned short* ql = (const unsigned short*)(blk + 64 * hh + 32 * (c & 1));
  const unsigned short* qh = (const unsigned short*)(blk + 128 + 32 * hh);
  const float d = dq_half(((const unsigned short*)blk)[104]);
  const signed char* sc = (const signed char*)blk + 192 + 8 * hh + 2 * c;
  const int lo_shift = 4 * (c >> 1), hi_shift = 2 * c;
  int w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int lo = (dq_w16(ql + 2 * i) >> lo_shift) & 0x0F0F0F0F;
    const int hi = ((dq_w16(qh + 2 * i) >> hi_shift) & 0x03030303) << 4;
    w[i] = (int)__vsubss4((unsigned)(lo | hi), 0x20202020u);
  }
  const float sa = (float)sc[0], sb = (float)sc[1];
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    if (r >= m_left) break;
    const int4* xa = (const int4*)(xq + r * k + 128 * hh + 32 * c);
    const int4 a = xa[0], b = xa[1];
    int s0 = __dp4a(w[0], a.x, 0);
    s0 = __dp4a(w[1], a.y, s0);
    s0 = __dp4a(w[2], a.z, s0);
    s0 = __dp4a(w[3], a.w, s0);
    int s1 = __dp4a(w[4], b.x, 0);
    s1 = __dp4a(w[5], b.y, s1);
    s1 = __dp4a(w[6], b.z, s1);
    s1 = __dp4a(w[7], b.w, s1);
    acc[r] += d * xds[r * (k / 32) + 4 * hh + c].x * (sa * (float)s0 + sb * (float)s1);
  }
#endif
}

// acc[r] += the lane's tasks of weight row `row` against quantized rows m0 + r of x.
__device__ __forceinline__ void dq_row_tasks(const unsigned char* __restrict__ row, const signed char* __restrict__ xq0,
                                             const float2* __restrict__ xds0, long long k, long long m_left, int lane,
                                             float (&acc)[MR]) {
  const long long tasks = k / QE * UPB;
#pragma unroll 2
  for (long long t = lane; t < tasks; t += 32) {
    const long long b = t / UPB;
    dq_task(row + b * QB, (int)(t % UPB), xq0 + b * QE, xds0 + b * (QE / 32), k, m_left, acc);
  }
}

extern "C" __global__ void __launch_bounds__(WARPS * 32) dequant_gemv_dp4a(const signed char* __restrict__ xq,
                                                                           const float2* __restrict__ xds,
                                                                           const DqParts o, long long m, long long k,
                                                                           long long row_bytes) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long col = (long long)blockIdx.x * WARPS + warp;
  const long long m0 = (long long)blockIdx.y * MR;
  dq_prefetch_then_wait(o, col, row_bytes, lane);
  if (col >= dq_features(o)) return;  // the whole warp
  long long j, n;
  const int p = dq_part(o, col, &j, &n);
  float acc[MR], acc2[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) acc[r] = acc2[r] = 0.0f;
  const signed char* xq0 = xq + m0 * k;
  const float2* xds0 = xds + m0 * (k / 32);
  dq_row_tasks(dq_pick(o.w, p) + j * row_bytes, xq0, xds0, k, m - m0, lane, acc);
#if SWIGLU
  dq_row_tasks(o.w[1] + j * row_bytes, xq0, xds0, k, m - m0, lane, acc2);
#endif
  dq_store(acc, acc2, o, p, j, n, m0, m, lane);
}
)CUDA";

}  // namespace rlx::cuda::ksrc
