// The channel-lane tile kernel of conv_direct.h on AVX-512: up to 32 output channels in the
// lanes of two zmm registers (or up to 16 in one) x up to 8 output positions, the weights of a
// 32-channel block packed as k rows of 32 floats (of a 16-channel block, 16: the AVX2 kernel's
// packing). Per tap: one weight load per register, one broadcast per position, one FMA per
// register and position: half the instructions per multiply-add of the AVX2 kernel (16
// channels x 6 positions), which matters on a core whose front end is shared (this VM's neighbours take it:
// the AVX2 kernel fell to 31-39 GMAC/s where this one held 47-52, both ~55 when alone). Sums
// start from the bias and add one FMA per tap in k order, as the AVX2 kernels do (same bits).
// Compiled for AVX-512F; only called after conv_direct_avx512_usable().
#include <algorithm>
#include <cstdint>

#include "backends/cpu/conv_direct.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/shuffle_avx2.h"

namespace rlx::cpu {

bool conv_direct_avx512_usable() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
}

}  // namespace rlx::cpu

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's avx512fintrin.h builds 256-bit halves from _mm256_undefined_pd(), which its own
// -Wmaybe-uninitialized then reports at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace rlx::cpu {
namespace {

#define RLX_CL32_INLINE inline __attribute__((always_inline))

// The 8-float half h (0 low, 1 high) of v.
RLX_CL32_INLINE __m256 half(__m512 v, int h) {
  return _mm512_castps512_ps256(h == 0 ? v : _mm512_shuffle_f32x4(v, v, 0xEE));
}

// NP positions x NV zmm vectors of 16 channels; c[m * ldc + j] for m < nch, j < NP. The sums
// start from the bias, or (bias null) from what c holds: a block of taps after an earlier one.
template <int NV, int NP>
RLX_CL32_INLINE void tile(int64_t k, const float* w, const float* b, const int32_t* off, const int32_t* pos,
                          const float* bias, float* c, int64_t ldc, int64_t nch) {
  const float* xb[NP];
  for (int j = 0; j < NP; ++j) xb[j] = b + pos[j];
  __m512 acc[NP][NV];
  if (bias) {
    for (int v = 0; v < NV; ++v) {
      const __m512 bv = _mm512_loadu_ps(bias + 16 * v);
      for (int j = 0; j < NP; ++j) acc[j][v] = bv;
    }
  } else {
    // The stored partial sums back into the lanes (channel rows of NP floats, transposed).
    alignas(64) float t[NP][16 * NV] = {};
    for (int64_t m = 0; m < nch; ++m)
      for (int j = 0; j < NP; ++j) t[j][m] = c[m * ldc + j];
    for (int j = 0; j < NP; ++j)
      for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_load_ps(t[j] + 16 * v);
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    const int64_t o = off[kk];
    __m512 wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_ps(w + kk * 16 * NV + 16 * v);
    for (int j = 0; j < NP; ++j) {
      const __m512 x = _mm512_set1_ps(xb[j][o]);
      for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_fmadd_ps(wv[v], x, acc[j][v]);
    }
  }
  if constexpr (NP == 8) {
    // Each group of 8 channels transposed in registers: one 8-float store per channel.
#pragma GCC unroll 4
    for (int g = 0; g < 2 * NV; ++g) {
      const int64_t nv = std::min<int64_t>(8, nch - 8 * g);
      if (nv <= 0) break;
      __m256 r[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) r[j] = half(acc[j][g / 2], g % 2);
      avx2::transpose8(r);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        if (i < nv) _mm256_storeu_ps(c + (8 * g + i) * ldc, r[i]);
    }
  } else {
    alignas(64) float t[NP][16 * NV];
    for (int j = 0; j < NP; ++j)
      for (int v = 0; v < NV; ++v) _mm512_store_ps(t[j] + 16 * v, acc[j][v]);
    for (int64_t m = 0; m < nch; ++m)
      for (int j = 0; j < NP; ++j) c[m * ldc + j] = t[j][m];
  }
}

template <int NV>
void positions(int64_t nch, int64_t npos, int64_t k, const float* w, const float* b, const int32_t* off,
               const int32_t* pos, const float* bias, float* c, int64_t ldc) {
  int64_t j = 0;
  for (; j + 8 <= npos; j += 8) tile<NV, 8>(k, w, b, off, pos + j, bias, c + j, ldc, nch);
  switch (npos - j) {
    case 7: tile<NV, 7>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 6: tile<NV, 6>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 5: tile<NV, 5>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 4: tile<NV, 4>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 3: tile<NV, 3>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 2: tile<NV, 2>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 1: tile<NV, 1>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    default: break;
  }
}

}  // namespace

void conv_direct_cl32_avx512(int64_t nch, int64_t npos, int64_t k, const float* w, const float* b, const int32_t* off,
                             const int32_t* pos, const float* bias, float* c, int64_t ldc) {
  if (nch > 16) positions<2>(nch, npos, k, w, b, off, pos, bias, c, ldc);
  else positions<1>(nch, npos, k, w, b, off, pos, bias, c, ldc);
}

void conv_direct_pack32_avx512(const float* w, int64_t rows, int64_t k, float* dst) {
  int64_t kk = 0;
  if (rows == 32)
    for (; kk + 8 <= k; kk += 8)
      for (int64_t g = 0; g < 4; ++g) avx2::transpose8(w + 8 * g * k + kk, k, dst + kk * 32 + 8 * g, 32);
  for (; kk < k; ++kk)
    for (int64_t r = 0; r < 32; ++r) dst[kk * 32 + r] = r < rows ? w[r * k + kk] : 0.f;
}

}  // namespace rlx::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

#else  // not x86-64 GCC/clang: conv_direct_avx512_usable() is false

namespace rlx::cpu {
bool conv_direct_avx512_usable() { return false; }
void conv_direct_cl32_avx512(int64_t, int64_t, int64_t, const float*, const float*, const int32_t*, const int32_t*,
                             const float*, float*, int64_t) {}
void conv_direct_pack32_avx512(const float*, int64_t, int64_t, float*) {}
}  // namespace rlx::cpu

#endif
