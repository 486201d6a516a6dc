// DequantMatMul with 16-bit float weights (QuantFormat::F16 / BF16, quant_matmul.h): the weight
// stays 2 bytes a value in memory and is widened 8 values at a time in registers (F16: vcvtph2ps;
// BF16: zero-extend and shift into the high half of an f32), then multiplied with f32 x by FMA.
// No rounding of x. Compiled for AVX2 + FMA + F16C like quant_matmul_avx2.cpp (the same pragma
// scheme, no standard-library templates between the pragmas); called only when
// dequant_matmul_half_native() said the CPU runs it.
#include <cstdint>

#include "backends/cpu/quant_matmul.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace rlx::cpu::avx2 {
namespace {

#define RLX_HINLINE inline __attribute__((always_inline))

// 8 weights at p (16 bytes) as f32.
template <bool kBf16> RLX_HINLINE __m256 load8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else return _mm256_cvtph_ps(h);
}

RLX_HINLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One weight row (k values, k a multiple of 32) against R x rows (x[r], each k f32 values):
// out[r * ld] = dot. V accumulators of 8 values per x row break the FMA dependency chain.
template <bool kBf16, int R, int V>
void dot_row(const uint8_t* w, int64_t k, const float* const* x, float* out, int64_t ld) {
  __m256 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t e = 0; e < k; e += 8 * V) {
    __m256 wv[V];
    for (int v = 0; v < V; ++v) wv[v] = load8<kBf16>(w + 2 * (e + 8 * v));
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(wv[v], _mm256_loadu_ps(x[r] + e + 8 * v), acc[r][v]);
  }
  for (int r = 0; r < R; ++r) {
    __m256 s = acc[r][0];
    for (int v = 1; v < V; ++v) s = _mm256_add_ps(s, acc[r][v]);
    out[r * ld] = hsum(s);
  }
}

template <bool kBf16>
void rows_of(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1,
             float* y, int64_t ldy) {
  for (int64_t j = n0; j < n1; ++j) {
    const uint8_t* wr = w + j * row_bytes;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      const float* xr[4] = {x + i * k, x + (i + 1) * k, x + (i + 2) * k, x + (i + 3) * k};
      dot_row<kBf16, 4, 2>(wr, k, xr, y + i * ldy + j, ldy);
    }
    for (; i < m; ++i) {
      const float* xr[1] = {x + i * k};
      dot_row<kBf16, 1, 4>(wr, k, xr, y + i * ldy + j, ldy);
    }
  }
}

template <bool kBf16> void decode_of(const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t k, float* out) {
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t e = 0; e < k; e += 8) _mm256_storeu_ps(out + j * k + e, load8<kBf16>(w + j * row_bytes + 2 * e));
}

}  // namespace

void half_rows(QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, int64_t n0,
               int64_t n1, float* y, int64_t ldy) {
  if (f == QuantFormat::F16) rows_of<false>(x, m, k, w, row_bytes, n0, n1, y, ldy);
  else if (f == QuantFormat::BF16) rows_of<true>(x, m, k, w, row_bytes, n0, n1, y, ldy);
}

void decode_half_rows(QuantFormat f, const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t k, float* out) {
  if (f == QuantFormat::F16) decode_of<false>(w, row_bytes, rows, k, out);
  else if (f == QuantFormat::BF16) decode_of<true>(w, row_bytes, rows, k, out);
}

}  // namespace rlx::cpu::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

namespace rlx::cpu::avx2 {
void half_rows(QuantFormat, const float*, int64_t, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t) {}
void decode_half_rows(QuantFormat, const uint8_t*, int64_t, int64_t, int64_t, float*) {}
}  // namespace rlx::cpu::avx2

#endif
