// The channel-interleaved f32 depthwise kernel (depthwise_channels_avx2.h).
#include "backends/cpu/depthwise_channels_avx2.h"

#include <algorithm>

#include "backends/cpu/conv_gemm.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/shuffle_avx2.h"
#define RLX_DWC_X86 1
#else
#define RLX_DWC_X86 0
#endif

namespace rlx::cpu {

bool depthwise_channels_usable(const Window3& win) {
  return RLX_DWC_X86 && conv_gemm_avx2_usable() && win.k[0] == 1 && win.out[0] == 1 && win.in[0] == 1;
}

bool depthwise_channels_preferred(const Window3& win) {
  // Maps of up to 128 x 128 outputs (the interleaved scratch of 8 channels stays near 0.5 MiB):
  // faster than the plane kernels at every width measured once the interleave is transposed in
  // registers (MobileNet stack, 1 thread, per step: 16 ch 112x112 3x3 0.29 -> 0.23 ms, 72 ch
  // 56x56 0.28 -> 0.14 ms, 64 ch 3x3 s2 112 -> 56 0.55 -> 0.30 ms; MobileNetV3's 8 ch 3x3 s2
  // 64x56 -> 32x28 25 -> 14 us). Larger maps stay on the plane kernels.
  return win.out[1] * win.out[2] <= 128 * 128;
}

#if RLX_DWC_X86

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace {

// NB consecutive output pixels of one row: acc = bias, then acc += w[tap] * x[pixel + tap].
template <int NB>
inline __attribute__((always_inline)) void pixels(const float* in, const int64_t* tap, int64_t taps, int64_t step,
                                                  const float* w, __m256 bias, float* out) {
  __m256 acc[NB];
  for (int j = 0; j < NB; ++j) acc[j] = bias;
  for (int64_t t = 0; t < taps; ++t) {
    const __m256 wv = _mm256_loadu_ps(w + 8 * t);
    const float* src = in + tap[t];
    for (int j = 0; j < NB; ++j) acc[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + j * step), acc[j]);
  }
  for (int j = 0; j < NB; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

// The same sums for windows KW wide with x stride SX and no x dilation: each input vector of a
// window row is loaded once and serves every pixel and tap that reads it.
template <int NB, int KW, int SX>
inline __attribute__((always_inline)) void pixels_rows(const float* in, const int64_t* row_off, int64_t kh,
                                                       const float* w, __m256 bias, float* out) {
  constexpr int kSpan = (NB - 1) * SX + KW;
  __m256 acc[NB];
  for (int j = 0; j < NB; ++j) acc[j] = bias;
  for (int64_t ky = 0; ky < kh; ++ky) {
    const float* src = in + row_off[ky];
    __m256 xv[kSpan];
    for (int i = 0; i < kSpan; ++i) xv[i] = _mm256_loadu_ps(src + 8 * i);
    const float* wr = w + ky * KW * 8;
    for (int kx = 0; kx < KW; ++kx) {
      const __m256 wv = _mm256_loadu_ps(wr + 8 * kx);
      for (int j = 0; j < NB; ++j) acc[j] = _mm256_fmadd_ps(wv, xv[j * SX + kx], acc[j]);
    }
  }
  for (int j = 0; j < NB; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

// One output row with the row-reuse kernels.
template <int KW, int SX>
void row_reuse(const float* row, const int64_t* row_off, int64_t kh, int64_t ow, const float* w, __m256 bias,
               float* orow) {
  int64_t ox = 0;
  for (; ox + 4 <= ow; ox += 4) pixels_rows<4, KW, SX>(row + ox * SX * 8, row_off, kh, w, bias, orow + ox * 8);
  for (; ox + 2 <= ow; ox += 2) pixels_rows<2, KW, SX>(row + ox * SX * 8, row_off, kh, w, bias, orow + ox * 8);
  for (; ox < ow; ++ox) pixels_rows<1, KW, SX>(row + ox * SX * 8, row_off, kh, w, bias, orow + ox * 8);
}

// De-interleaves the 8-float output pixels into the nch output planes: 8 pixels at a time by a
// transpose in registers, the rest one value at a time.
void deinterleave(const float* out, float* y, int64_t nch, int64_t out_sz) {
  int64_t q = 0;
  for (; q + 8 <= out_sz; q += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(out + (q + i) * 8);
    avx2::transpose8(r);
    for (int64_t j = 0; j < nch; ++j) _mm256_storeu_ps(y + j * out_sz + q, r[j]);
  }
  for (int64_t j = 0; j < nch; ++j)
    for (int64_t t = q; t < out_sz; ++t) y[j * out_sz + t] = out[t * 8 + j];
}

// Interleaves columns [c_lo, c_hi) of row r of the nch input planes into 8-float pixels at dst
// (pixel c at dst + c * 8): 8 columns at a time by a transpose, lanes past nch zero.
void interleave_row(const float* x, int64_t in_sz, int64_t nch, int64_t row_start, int64_t c_lo, int64_t c_hi,
                    float* dst) {
  int64_t c = c_lo;
  for (; c + 8 <= c_hi; c += 8) {
    __m256 r[8];
    for (int64_t j = 0; j < 8; ++j) r[j] = j < nch ? _mm256_loadu_ps(x + j * in_sz + row_start + c) : _mm256_setzero_ps();
    avx2::transpose8(r);
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (c + i) * 8, r[i]);
  }
  for (int64_t j = 0; j < nch; ++j)
    for (int64_t t = c; t < c_hi; ++t) dst[t * 8 + j] = x[j * in_sz + row_start + t];
}

using RowFn = void (*)(const float*, const int64_t*, int64_t, int64_t, const float*, __m256, float*);

RowFn row_kernel(int64_t kw, int64_t sx, int64_t dx) {
  if (dx != 1) return nullptr;
  if (sx == 1) return kw == 3 ? row_reuse<3, 1> : kw == 5 ? row_reuse<5, 1> : kw == 7 ? row_reuse<7, 1> : nullptr;
  if (sx == 2) return kw == 3 ? row_reuse<3, 2> : kw == 5 ? row_reuse<5, 2> : nullptr;
  return nullptr;
}

}  // namespace

void depthwise_channels_avx2(const float* x, int64_t nch, const float* w, const float* bias, const Window3& win,
                             float* y, DepthwiseChannelsScratch& s) {
  const int64_t ih = win.in[1], iw = win.in[2], oh = win.out[1], ow = win.out[2];
  const int64_t kh = win.k[1], kw = win.k[2], sy = win.stride[1], sx = win.stride[2];
  const int64_t dy = win.dil[1], dx = win.dil[2], pt = win.pad[1], pl = win.pad[2];
  const int64_t in_sz = win.in_size(), out_sz = win.out_size(), k = win.k_size();
  // The padded buffer covers every tap of every output pixel; input pixels past it (unread by
  // any output) are left out.
  const int64_t ph = (oh - 1) * sy + (kh - 1) * dy + 1, pw = (ow - 1) * sx + (kw - 1) * dx + 1;
  const int64_t r_lo = std::max<int64_t>(0, -pt), r_hi = std::min(ih, ph - pt);
  const int64_t c_lo = std::max<int64_t>(0, -pl), c_hi = std::min(iw, pw - pl);
  // Lanes past nch hold zeros or an earlier block's values: their sums are computed and never
  // stored.
  const int64_t layout[6] = {ph, pw, pt, pl, r_hi - r_lo, c_hi - c_lo};
  if (!std::equal(layout, layout + 6, s.layout)) {
    s.in.assign(static_cast<size_t>(ph * pw * 8), 0.f);
    std::copy(layout, layout + 6, s.layout);
  }
  s.out.resize(static_cast<size_t>(out_sz * 8));
  s.w.resize(static_cast<size_t>(k * 8));
  float* in = s.in.data();
  for (int64_t r = r_lo; r < r_hi; ++r) interleave_row(x, in_sz, nch, r * iw, c_lo, c_hi, in + ((r + pt) * pw + pl) * 8);
  for (int64_t j = 0; j < nch; ++j)
    for (int64_t t = 0; t < k; ++t) s.w[static_cast<size_t>(t * 8 + j)] = w[j * k + t];
  alignas(32) float b8[8] = {};
  if (bias)
    for (int64_t j = 0; j < nch; ++j) b8[j] = bias[j];
  const __m256 bv = _mm256_load_ps(b8);
  float* out = s.out.data();
  if (const RowFn fn = kh <= 64 ? row_kernel(kw, sx, dx) : nullptr) {
    int64_t row_off[64];
    for (int64_t ky = 0; ky < kh; ++ky) row_off[ky] = ky * dy * pw * 8;
    for (int64_t oy = 0; oy < oh; ++oy) fn(in + oy * sy * pw * 8, row_off, kh, ow, s.w.data(), bv, out + oy * ow * 8);
  } else {
    int64_t tap_small[64];
    std::vector<int64_t> tap_v(k > 64 ? static_cast<size_t>(k) : 0);
    int64_t* tap = k > 64 ? tap_v.data() : tap_small;
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t kx = 0; kx < kw; ++kx) tap[ky * kw + kx] = (ky * dy * pw + kx * dx) * 8;
    const int64_t step = sx * 8;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const float* row = in + oy * sy * pw * 8;
      float* orow = out + oy * ow * 8;
      int64_t ox = 0;
      for (; ox + 4 <= ow; ox += 4) pixels<4>(row + ox * step, tap, k, step, s.w.data(), bv, orow + ox * 8);
      for (; ox + 2 <= ow; ox += 2) pixels<2>(row + ox * step, tap, k, step, s.w.data(), bv, orow + ox * 8);
      for (; ox < ow; ++ox) pixels<1>(row + ox * step, tap, k, step, s.w.data(), bv, orow + ox * 8);
    }
  }
  deinterleave(out, y, nch, out_sz);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

void depthwise_channels_avx2(const float*, int64_t, const float*, const float*, const Window3&, float*,
                             DepthwiseChannelsScratch&) {}

#endif

}  // namespace rlx::cpu
