// The channel-lane tile kernel of conv_direct.h: up to 16 output channels in the lanes of two
// ymm registers x up to 6 output positions (or 8 channels x 8 positions), the weights of a
// 16-channel block packed as k rows of 16 floats, each position's input broadcast from the
// phase buffer at its own offset (so positions run on across output rows: no columns thrown
// away). Sums start from the bias and add one FMA per tap in k order, as the spatial tile does
// (so the same bits). Compiled for AVX2 + FMA; only called after conv_gemm_avx2_usable().
#include <algorithm>
#include <cstdint>

#include "backends/cpu/conv_direct.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/shuffle_avx2.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace rlx::cpu {
namespace {

#define RLX_CL_INLINE inline __attribute__((always_inline))

using avx2::transpose8;

// NP positions x NV vectors of 8 channels; c[m * ldc + j] for m < nch, j < NP. The sums start
// from the bias, or (bias null) from what c holds: a block of taps after an earlier one.
template <int NP, int NV>
RLX_CL_INLINE void cl_tile(int64_t k, const float* w, const float* b, const int32_t* off, const int32_t* pos,
                           const float* bias, float* c, int64_t ldc, int64_t nch) {
  const float* xb[NP];
  for (int j = 0; j < NP; ++j) xb[j] = b + pos[j];
  __m256 acc[NP][NV];
  if (bias) {
    for (int v = 0; v < NV; ++v) {
      const __m256 bv = _mm256_loadu_ps(bias + 8 * v);
      for (int j = 0; j < NP; ++j) acc[j][v] = bv;
    }
  } else if constexpr (NP == 6 || NP == 8) {
    // The stored partial sums back into the lanes: 8 channel rows transposed in registers.
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m256 r[8];
      const int64_t nv = std::min<int64_t>(8, nch - 8 * v);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const float* s = c + (8 * v + i) * ldc;
        if (i >= nv) r[i] = _mm256_setzero_ps();
        else if constexpr (NP == 8) r[i] = _mm256_loadu_ps(s);
        else
          r[i] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(s)),
                                      _mm_loadl_pi(_mm_setzero_ps(), reinterpret_cast<const __m64*>(s + 4)), 1);
      }
      transpose8(r);
#pragma GCC unroll 8
      for (int j = 0; j < NP; ++j) acc[j][v] = r[j];
    }
  } else {
    alignas(32) float t[NP][8 * NV] = {};
    for (int64_t m = 0; m < nch; ++m)
      for (int j = 0; j < NP; ++j) t[j][m] = c[m * ldc + j];
    for (int j = 0; j < NP; ++j)
      for (int v = 0; v < NV; ++v) acc[j][v] = _mm256_load_ps(t[j] + 8 * v);
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    const int64_t o = off[kk];
    __m256 wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = _mm256_loadu_ps(w + kk * 16 + 8 * v);
    for (int j = 0; j < NP; ++j) {
      const __m256 x = _mm256_broadcast_ss(xb[j] + o);
      for (int v = 0; v < NV; ++v) acc[j][v] = _mm256_fmadd_ps(wv[v], x, acc[j][v]);
    }
  }
  if constexpr (NP == 6 || NP == 8) {
    // Full tiles: each 8-channel vector group transposed in registers, one store per channel
    // (6 positions: 4 + 2 floats).
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) r[j] = j < NP ? acc[j][v] : _mm256_setzero_ps();
      transpose8(r);
      const int64_t nv = std::min<int64_t>(8, nch - 8 * v);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        if (i >= nv) break;
        float* d = c + (8 * v + i) * ldc;
        if constexpr (NP == 8) {
          _mm256_storeu_ps(d, r[i]);
        } else {
          _mm_storeu_ps(d, _mm256_castps256_ps128(r[i]));
          _mm_storel_pi(reinterpret_cast<__m64*>(d + 4), _mm256_extractf128_ps(r[i], 1));
        }
      }
    }
  } else {
    alignas(32) float t[NP][8 * NV];
    for (int j = 0; j < NP; ++j)
      for (int v = 0; v < NV; ++v) _mm256_store_ps(t[j] + 8 * v, acc[j][v]);
    for (int64_t m = 0; m < nch; ++m)
      for (int j = 0; j < NP; ++j) c[m * ldc + j] = t[j][m];
  }
}

template <int NV, int NPMAX>
void cl_positions(int64_t nch, int64_t npos, int64_t k, const float* w, const float* b, const int32_t* off,
                  const int32_t* pos, const float* bias, float* c, int64_t ldc) {
  int64_t j = 0;
  for (; j + NPMAX <= npos; j += NPMAX) cl_tile<NPMAX, NV>(k, w, b, off, pos + j, bias, c + j, ldc, nch);
  switch (npos - j) {
    case 7: if constexpr (NPMAX > 7) cl_tile<7, NV>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 6: if constexpr (NPMAX > 6) cl_tile<6, NV>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 5: cl_tile<5, NV>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 4: cl_tile<4, NV>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 3: cl_tile<3, NV>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 2: cl_tile<2, NV>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    case 1: cl_tile<1, NV>(k, w, b, off, pos + j, bias, c + j, ldc, nch); break;
    default: break;
  }
}

}  // namespace

void conv_direct_fill_plane_avx2(const float* x, int64_t h, int64_t w, int64_t sy, int64_t sx, int64_t oy, int64_t ox,
                                 int64_t hq, int64_t wq, float* d) {
  // Rows [r_lo, r_hi) and columns [c_lo, c_hi) read the input.
  auto cdiv = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  const int64_t r_lo = std::clamp<int64_t>(cdiv(-oy, sy), 0, hq), r_hi = std::clamp<int64_t>(cdiv(h - oy, sy), r_lo, hq);
  const int64_t c_lo = std::clamp<int64_t>(cdiv(-ox, sx), 0, wq), c_hi = std::clamp<int64_t>(cdiv(w - ox, sx), c_lo, wq);
  const __m256 zero = _mm256_setzero_ps();
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_set1_epi32(static_cast<int>(c_lo) - 1), hi = _mm256_set1_epi32(static_cast<int>(c_hi));
  for (int64_t rr = 0; rr < hq; ++rr) {
    float* dr = d + rr * wq;
    if (rr < r_lo || rr >= r_hi || c_lo == c_hi) {
      for (int64_t jj = 0; jj < wq; jj += 8) _mm256_storeu_ps(dr + jj, zero);
      continue;
    }
    // src[jj * sx] is column jj; lanes outside [c_lo, c_hi) are never read (masked loads).
    const float* src = x + (rr * sy + oy) * w + ox;
    if (sx == 2 && c_hi - c_lo >= 16 && ox + 2 * (c_hi - 8) - 1 >= 0) {
      // Stride 2 with at least two vectors of values: zeros, the even floats of plain loads (the
      // last vector, overlapping the one before it, as the odd floats of 16 loaded one column
      // early, so no load passes the row's last value), zeros; later stores overwrite the zeros
      // an earlier one wrote past its range. (Stride 1 stays on the loop below: with overlapping
      // stores it was 3x slower; so were rows of under 16 values, by ~10%.)
      for (int64_t jj = 0; jj < c_lo; jj += 8) _mm256_storeu_ps(dr + jj, zero);
      int64_t jj = c_lo;
      for (; jj + 8 <= c_hi && ox + 2 * jj + 16 <= w; jj += 8)
        _mm256_storeu_ps(dr + jj, avx2::even_floats(_mm256_loadu_ps(src + 2 * jj), _mm256_loadu_ps(src + 2 * jj + 8)));
      for (; jj < c_hi; jj += 8) {
        const int64_t at = std::min(jj, c_hi - 8);
        const float* s0 = src + 2 * at - 1;
        _mm256_storeu_ps(dr + at, avx2::odd_floats(_mm256_loadu_ps(s0), _mm256_loadu_ps(s0 + 8)));
      }
      for (int64_t z = c_hi; z < wq; z += 8) _mm256_storeu_ps(dr + z, zero);
      continue;
    }
    for (int64_t jj = 0; jj < wq; jj += 8) {
      // Interior vectors (every lane valid, the loads inside the row): plain loads.
      if (jj >= c_lo && jj + 8 <= c_hi) {
        if (sx == 1) {
          _mm256_storeu_ps(dr + jj, _mm256_loadu_ps(src + jj));
          continue;
        }
        if (sx == 2 && ox + 2 * jj + 16 <= w) {
          _mm256_storeu_ps(dr + jj, avx2::even_floats(_mm256_loadu_ps(src + 2 * jj), _mm256_loadu_ps(src + 2 * jj + 8)));
          continue;
        }
      }
      const __m256i j = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(jj)), lanes);
      const __m256i m = _mm256_and_si256(_mm256_cmpgt_epi32(j, lo), _mm256_cmpgt_epi32(hi, j));
      __m256 v;
      if (sx == 1) {
        v = _mm256_maskload_ps(src + jj, m);
      } else if (sx == 2) {  // the even floats of 16, each loaded where its column is valid
        const __m256i even = _mm256_setr_epi32(-1, 0, -1, 0, -1, 0, -1, 0);
        const __m256i m0 = _mm256_and_si256(_mm256_permutevar8x32_epi32(m, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)), even);
        const __m256i m1 = _mm256_and_si256(_mm256_permutevar8x32_epi32(m, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)), even);
        const __m256 a = _mm256_maskload_ps(src + 2 * jj, m0), b = _mm256_maskload_ps(src + 2 * jj + 8, m1);
        v = avx2::even_floats(a, b);
      } else {
        alignas(32) float t[8];
        for (int i = 0; i < 8; ++i) t[i] = jj + i >= c_lo && jj + i < c_hi ? src[(jj + i) * sx] : 0.f;
        v = _mm256_load_ps(t);
      }
      _mm256_storeu_ps(dr + jj, v);
    }
  }
}

void conv_direct_pack_avx2(const float* w, int64_t rows, int64_t k, float* dst) {
  int64_t kk = 0;
  if (rows == 16)
    for (; kk + 8 <= k; kk += 8) {
      transpose8(w + kk, k, dst + kk * 16, 16);
      transpose8(w + 8 * k + kk, k, dst + kk * 16 + 8, 16);
    }
  for (; kk < k; ++kk)
    for (int64_t r = 0; r < 16; ++r) dst[kk * 16 + r] = r < rows ? w[r * k + kk] : 0.f;
}

void conv_direct_cl_avx2(int64_t nch, int64_t npos, int64_t k, const float* w, const float* b, const int32_t* off,
                         const int32_t* pos, const float* bias, float* c, int64_t ldc) {
  if (nch > 8) cl_positions<2, 6>(nch, npos, k, w, b, off, pos, bias, c, ldc);
  else cl_positions<1, 8>(nch, npos, k, w, b, off, pos, bias, c, ldc);
}

}  // namespace rlx::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64 GCC/clang: conv_direct_usable() is false

namespace rlx::cpu {
void conv_direct_cl_avx2(int64_t, int64_t, int64_t, const float*, const float*, const int32_t*, const int32_t*,
                         const float*, float*, int64_t) {}
void conv_direct_pack_avx2(const float*, int64_t, int64_t, float*) {}
void conv_direct_fill_plane_avx2(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                 float*) {}
}  // namespace rlx::cpu

#endif
