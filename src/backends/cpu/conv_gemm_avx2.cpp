// The AVX2/FMA tile kernel of conv_gemm.h: up to 6 output channels x 16 positions held in 12
// ymm accumulators (bias first, then one FMA per weight and input vector, k in order), the
// weight rows broadcast from where they lie, the input rows loaded 8 floats at a time (the
// last vector of a row masked when the block is narrower). The direct conv (conv_direct.h)
// runs the same tiles with input row k at b + off[k] instead of b + k * ldb. Everything between
// the pragmas is compiled for AVX2 + FMA and only called after conv_gemm_avx2_usable().
#include <cstdint>

#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_gemm.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

namespace rlx::cpu {

bool conv_gemm_avx2_usable() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
}

}  // namespace rlx::cpu

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace rlx::cpu {
namespace {

#define RLX_GINLINE inline __attribute__((always_inline))

// Lanes [0, valid) on (valid in 1..8).
RLX_GINLINE __m256i lane_mask(int64_t valid) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), idx);
}

// MR rows x NV vectors of 8 columns; with MASK the last vector only has the lanes of `mask`.
// Input row kk starts at b + kk * ldb, or (OFF, the direct conv) at b + off[kk].
template <int MR, int NV, bool MASK, bool OFF = false>
RLX_GINLINE void tile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, const int32_t* off,
                      const float* bias, float* c, int64_t ldc, __m256i mask) {
  __m256 acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    const __m256 init = _mm256_set1_ps(bias ? bias[r] : 0.f);
    for (int v = 0; v < NV; ++v) acc[r][v] = init;
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* bk;
    if constexpr (OFF) bk = b + off[kk];
    else bk = b + kk * ldb;
    __m256 bv[NV];
    for (int v = 0; v < NV; ++v)
      bv[v] = (MASK && v == NV - 1) ? _mm256_maskload_ps(bk + 8 * v, mask) : _mm256_loadu_ps(bk + 8 * v);
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + kk);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + 8 * v;
      if (MASK && v == NV - 1) _mm256_maskstore_ps(p, mask, acc[r][v]);
      else _mm256_storeu_ps(p, acc[r][v]);
    }
}

// Vectors per tile for MR rows: about 12 accumulators (a block of 2 rows, e.g. the second block of
// an 8-channel conv, runs 2 x 4 vectors instead of 2 x 2), within the 16 ymm registers with the
// NV input vectors and the broadcast weight. The sums are the same whatever the tile's width.
template <int MR> constexpr int wide_vectors() { return MR >= 5 ? 2 : MR >= 3 ? 3 : 4; }

template <int MR>
void rows_block(int64_t cols, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, const float* bias,
                float* c, int64_t ldc) {
  const __m256i full = _mm256_set1_epi32(-1);
  constexpr int NW = wide_vectors<MR>();
  int64_t j = 0;
  for (; j + 8 * NW <= cols; j += 8 * NW) tile<MR, NW, false>(k, a, lda, b + j, ldb, nullptr, bias, c + j, ldc, full);
  for (; j + 16 <= cols; j += 16) tile<MR, 2, false>(k, a, lda, b + j, ldb, nullptr, bias, c + j, ldc, full);
  const int64_t rest = cols - j;
  if (rest > 8) tile<MR, 2, true>(k, a, lda, b + j, ldb, nullptr, bias, c + j, ldc, lane_mask(rest - 8));
  else if (rest == 8) tile<MR, 1, false>(k, a, lda, b + j, ldb, nullptr, bias, c + j, ldc, full);
  else if (rest > 0) tile<MR, 1, true>(k, a, lda, b + j, ldb, nullptr, bias, c + j, ldc, lane_mask(rest));
}

template <int MR>
void rows_block_off(int64_t cols, int64_t k, const float* a, int64_t lda, const float* b, const int32_t* off,
                    const float* bias, float* c, int64_t ldc) {
  const __m256i full = _mm256_set1_epi32(-1);
  constexpr int NW = wide_vectors<MR>();
  int64_t j = 0;
  for (; j + 8 * NW <= cols; j += 8 * NW) tile<MR, NW, false, true>(k, a, lda, b + j, 0, off, bias, c + j, ldc, full);
  for (; j + 16 <= cols; j += 16) tile<MR, 2, false, true>(k, a, lda, b + j, 0, off, bias, c + j, ldc, full);
  const int64_t rest = cols - j;
  if (rest > 8) tile<MR, 2, true, true>(k, a, lda, b + j, 0, off, bias, c + j, ldc, lane_mask(rest - 8));
  else if (rest == 8) tile<MR, 1, false, true>(k, a, lda, b + j, 0, off, bias, c + j, ldc, full);
  else if (rest > 0) tile<MR, 1, true, true>(k, a, lda, b + j, 0, off, bias, c + j, ldc, lane_mask(rest));
}

}  // namespace

void conv_gemm_block_avx2(int64_t rows, int64_t cols, int64_t k, const float* a, int64_t lda, const float* b,
                          int64_t ldb, const float* bias, float* c, int64_t ldc) {
  if (conv_zmm_enabled()) return conv_gemm_block_avx512(rows, cols, k, a, lda, b, ldb, bias, c, ldc);
  switch (rows) {
    case 6: return rows_block<6>(cols, k, a, lda, b, ldb, bias, c, ldc);
    case 5: return rows_block<5>(cols, k, a, lda, b, ldb, bias, c, ldc);
    case 4: return rows_block<4>(cols, k, a, lda, b, ldb, bias, c, ldc);
    case 3: return rows_block<3>(cols, k, a, lda, b, ldb, bias, c, ldc);
    case 2: return rows_block<2>(cols, k, a, lda, b, ldb, bias, c, ldc);
    case 1: return rows_block<1>(cols, k, a, lda, b, ldb, bias, c, ldc);
    default: return;
  }
}

void conv_direct_block_avx2(int64_t rows, int64_t cols, int64_t k, const float* a, int64_t lda, const float* b,
                            const int32_t* off, const float* bias, float* c, int64_t ldc) {
  if (conv_zmm_enabled()) return conv_direct_block_avx512(rows, cols, k, a, lda, b, off, bias, c, ldc);
  switch (rows) {
    case 6: return rows_block_off<6>(cols, k, a, lda, b, off, bias, c, ldc);
    case 5: return rows_block_off<5>(cols, k, a, lda, b, off, bias, c, ldc);
    case 4: return rows_block_off<4>(cols, k, a, lda, b, off, bias, c, ldc);
    case 3: return rows_block_off<3>(cols, k, a, lda, b, off, bias, c, ldc);
    case 2: return rows_block_off<2>(cols, k, a, lda, b, off, bias, c, ldc);
    case 1: return rows_block_off<1>(cols, k, a, lda, b, off, bias, c, ldc);
    default: return;
  }
}

}  // namespace rlx::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64 GCC/clang: the OpenBLAS path only

namespace rlx::cpu {
bool conv_gemm_avx2_usable() { return false; }
void conv_gemm_block_avx2(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, const float*, float*,
                          int64_t) {}
void conv_direct_block_avx2(int64_t, int64_t, int64_t, const float*, int64_t, const float*, const int32_t*,
                            const float*, float*, int64_t) {}
}  // namespace rlx::cpu

#endif
