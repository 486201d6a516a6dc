// The AVX2 tile of int_gemm.h: up to 6 rows x 16 columns in 12 ymm accumulators of 8 i32. Per
// pair of k: two 16-value loads of the panel (8 columns x 2 k each), then per row the row's
// (k, k+1) weights broadcast as one 32-bit word and one vpmaddwd per 8 columns (a0 b0 + a1 b1 in
// 32 bits, exact for values in [-255, 255]) added with vpaddd (wrapping, as the portable tile).
// Everything between the pragmas is compiled for AVX2 and only called after
// int_gemm_avx2_usable().
#include <cstdint>
#include <cstring>

#include "backends/cpu/int_gemm.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

namespace rlx::cpu {

bool int_gemm_avx2_usable() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return ok;
}

}  // namespace rlx::cpu

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace rlx::cpu {
namespace {

template <int MR>
inline __attribute__((always_inline)) void tile(int64_t cols, int64_t kp, const int16_t* a, const int16_t* b,
                                                int32_t* c, int64_t ldc) {
  __m256i acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t p = 0; p < kp; ++p) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * 32));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * 32 + 16));
    const int16_t* ap = a + p * kIntRows * 2;
    for (int r = 0; r < MR; ++r) {
      int32_t w;
      std::memcpy(&w, ap + 2 * r, sizeof w);
      const __m256i av = _mm256_set1_epi32(w);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, b0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, b1));
    }
  }
  if (cols == kIntCols) {
    for (int r = 0; r < MR; ++r) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc), acc[r][0]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc + 8), acc[r][1]);
    }
    return;
  }
  alignas(32) int32_t buf[kIntCols];
  for (int r = 0; r < MR; ++r) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(buf), acc[r][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(buf + 8), acc[r][1]);
    std::memcpy(c + r * ldc, buf, static_cast<size_t>(cols) * sizeof(int32_t));
  }
}

}  // namespace

void int_tile_avx2(int64_t rows, int64_t cols, int64_t kp, const int16_t* a, const int16_t* b, int32_t* c,
                   int64_t ldc) {
  switch (rows) {
    case 6: return tile<6>(cols, kp, a, b, c, ldc);
    case 5: return tile<5>(cols, kp, a, b, c, ldc);
    case 4: return tile<4>(cols, kp, a, b, c, ldc);
    case 3: return tile<3>(cols, kp, a, b, c, ldc);
    case 2: return tile<2>(cols, kp, a, b, c, ldc);
    case 1: return tile<1>(cols, kp, a, b, c, ldc);
    default: return;
  }
}

}  // namespace rlx::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64 GCC/clang: the portable tile only

namespace rlx::cpu {
bool int_gemm_avx2_usable() { return false; }
void int_tile_avx2(int64_t rows, int64_t cols, int64_t kp, const int16_t* a, const int16_t* b, int32_t* c,
                   int64_t ldc) {
  int_tile_portable(rows, cols, kp, a, b, c, ldc);
}
}  // namespace rlx::cpu

#endif
