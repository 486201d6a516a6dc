// The padded-plane f32 depthwise kernel (depthwise_avx2.h).
#include "backends/cpu/depthwise_avx2.h"

#include <algorithm>

#include "backends/cpu/conv_gemm.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/shuffle_avx2.h"
#define RLX_DW_X86 1
#else
#define RLX_DW_X86 0
#endif

namespace rlx::cpu {

bool depthwise_padded_usable(const Window3& win) {
  return RLX_DW_X86 && conv_gemm_avx2_usable() && win.k[0] == 1 && win.out[0] == 1 && win.in[0] == 1 &&
         (win.stride[2] == 1 || win.stride[2] == 2) && win.k[1] * win.k[2] <= 64;
}

PaddedPlane depthwise_padded_geometry(const Window3& win) {
  const int64_t ow8 = (win.out[2] + 7) / 8 * 8;
  // The widest read: the last vector's 8 (stride 1) or 16 (stride 2) floats at its last tap.
  const int64_t reach = (ow8 - 8) * win.stride[2] + (win.k[2] - 1) * win.dil[2] + 8 * win.stride[2];
  PaddedPlane g;
  g.width = (std::max(win.pad[2] + win.in[2], reach) + 7) / 8 * 8;
  g.height = std::max(win.pad[1] + win.in[1], (win.out[1] - 1) * win.stride[1] + (win.k[1] - 1) * win.dil[1] + 1);
  return g;
}

#if RLX_DW_X86

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace {

#define RLX_DW_INLINE inline __attribute__((always_inline))

template <int SX>
RLX_DW_INLINE __m256 load_x(const float* s) {
  if constexpr (SX == 1) {
    return _mm256_loadu_ps(s);
  } else {  // the even floats of 16
    return avx2::even_floats(_mm256_loadu_ps(s), _mm256_loadu_ps(s + 8));
  }
}

// NB output vectors at input offsets base[j] (padded buffer) -> y + out[j] (masks[j] lanes).
template <int NB, int SX>
RLX_DW_INLINE void vectors(const float* p, const int64_t* base, const int64_t* tap, int64_t taps, const float* w,
                           float bias, float* y, const int64_t* out, const int* valid) {
  __m256 acc[NB];
  for (int j = 0; j < NB; ++j) acc[j] = _mm256_set1_ps(bias);
  for (int64_t t = 0; t < taps; ++t) {
    const __m256 wv = _mm256_set1_ps(w[t]);
    for (int j = 0; j < NB; ++j) acc[j] = _mm256_fmadd_ps(wv, load_x<SX>(p + base[j] + tap[t]), acc[j]);
  }
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int j = 0; j < NB; ++j) {
    if (valid[j] >= 8) _mm256_storeu_ps(y + out[j], acc[j]);
    else _mm256_maskstore_ps(y + out[j], _mm256_cmpgt_epi32(_mm256_set1_epi32(valid[j]), idx), acc[j]);
  }
}

template <int SX>
void plane(const float* p, const PaddedPlane& g, const float* w, float bias, const Window3& win, float* y) {
  const int64_t oh = win.out[1], ow = win.out[2], sy = win.stride[1];
  int64_t tap[64];
  int64_t taps = 0;
  for (int64_t ky = 0; ky < win.k[1]; ++ky)
    for (int64_t kx = 0; kx < win.k[2]; ++kx) tap[taps++] = ky * win.dil[1] * g.width + kx * win.dil[2];
  const int64_t per_row = (ow + 7) / 8;
  const int64_t total = oh * per_row;
  int64_t base[4], out[4];
  int valid[4];
  int64_t v = 0;
  while (v < total) {
    const int nb = static_cast<int>(std::min<int64_t>(4, total - v));
    for (int j = 0; j < nb; ++j, ++v) {
      const int64_t oy = v / per_row, ox = (v % per_row) * 8;
      base[j] = oy * sy * g.width + ox * SX;
      out[j] = oy * ow + ox;
      valid[j] = static_cast<int>(std::min<int64_t>(8, ow - ox));
    }
    switch (nb) {
      case 4: vectors<4, SX>(p, base, tap, taps, w, bias, y, out, valid); break;
      case 3: vectors<3, SX>(p, base, tap, taps, w, bias, y, out, valid); break;
      case 2: vectors<2, SX>(p, base, tap, taps, w, bias, y, out, valid); break;
      default: vectors<1, SX>(p, base, tap, taps, w, bias, y, out, valid); break;
    }
  }
}

}  // namespace

void depthwise_padded_avx2(const float* p, const PaddedPlane& g, const float* w, float bias, const Window3& win,
                           float* y) {
  if (win.stride[2] == 1) plane<1>(p, g, w, bias, win, y);
  else plane<2>(p, g, w, bias, win, y);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

void depthwise_padded_avx2(const float*, const PaddedPlane&, const float*, float, const Window3&, float*) {}

#endif

}  // namespace rlx::cpu
