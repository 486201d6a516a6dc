// The AVX-512 form of conv_gemm's tile kernel (conv_gemm.h): up to 6 output channels x 32, 48 or
// 64 positions in zmm accumulators, the same sums as the AVX2 tiles (bias first, then one FMA
// per weight and input vector, k in order: the same bits) with half the instructions per
// multiply-add (pointwise convs of MobileNet-style stacks are ~70% of their run). Input row k
// starts at b + k * ldb, or (the direct conv's spatial tiles) at b + off[k]. Compiled for
// AVX-512F; only called when conv_zmm_enabled() (conv_direct.h).
#include <cstdint>

#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_gemm.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif

namespace rlx::cpu {
namespace {

#define RLX_ZINLINE inline __attribute__((always_inline))

// MR rows x NV vectors of 16 columns; the last vector only has the lanes of `last`.
template <int MR, int NV, bool OFF>
RLX_ZINLINE void ztile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, const int32_t* off,
                       const float* bias, float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    const __m512 init = _mm512_set1_ps(bias ? bias[r] : 0.f);
    for (int v = 0; v < NV; ++v) acc[r][v] = init;
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* bk;
    if constexpr (OFF) bk = b + off[kk];
    else bk = b + kk * ldb;
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, bk + 16 * v) : _mm512_loadu_ps(bk + 16 * v);
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + kk]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + 16 * v;
      if (v == NV - 1) _mm512_mask_storeu_ps(p, last, acc[r][v]);
      else _mm512_storeu_ps(p, acc[r][v]);
    }
}

// Vectors per tile for MR rows: 12-16 accumulators.
template <int MR> constexpr int zvectors() { return MR >= 5 ? 2 : MR >= 3 ? 4 : 8; }

template <int MR, bool OFF>
void zrows(int64_t cols, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, const int32_t* off,
           const float* bias, float* c, int64_t ldc) {
  constexpr int NW = zvectors<MR>();
  const __mmask16 full = 0xFFFF;
  int64_t j = 0;
  for (; j + 16 * NW <= cols; j += 16 * NW) ztile<MR, NW, OFF>(k, a, lda, b + j, ldb, off, bias, c + j, ldc, full);
  for (; j + 16 <= cols; j += 16) ztile<MR, 1, OFF>(k, a, lda, b + j, ldb, off, bias, c + j, ldc, full);
  if (j < cols) {
    const __mmask16 rest = static_cast<__mmask16>((1u << (cols - j)) - 1);
    ztile<MR, 1, OFF>(k, a, lda, b + j, ldb, off, bias, c + j, ldc, rest);
  }
}

template <bool OFF>
void zblock(int64_t rows, int64_t cols, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
            const int32_t* off, const float* bias, float* c, int64_t ldc) {
  switch (rows) {
    case 6: return zrows<6, OFF>(cols, k, a, lda, b, ldb, off, bias, c, ldc);
    case 5: return zrows<5, OFF>(cols, k, a, lda, b, ldb, off, bias, c, ldc);
    case 4: return zrows<4, OFF>(cols, k, a, lda, b, ldb, off, bias, c, ldc);
    case 3: return zrows<3, OFF>(cols, k, a, lda, b, ldb, off, bias, c, ldc);
    case 2: return zrows<2, OFF>(cols, k, a, lda, b, ldb, off, bias, c, ldc);
    case 1: return zrows<1, OFF>(cols, k, a, lda, b, ldb, off, bias, c, ldc);
    default: return;
  }
}

}  // namespace

void conv_gemm_block_avx512(int64_t rows, int64_t cols, int64_t k, const float* a, int64_t lda, const float* b,
                            int64_t ldb, const float* bias, float* c, int64_t ldc) {
  zblock<false>(rows, cols, k, a, lda, b, ldb, nullptr, bias, c, ldc);
}

void conv_direct_block_avx512(int64_t rows, int64_t cols, int64_t k, const float* a, int64_t lda, const float* b,
                              const int32_t* off, const float* bias, float* c, int64_t ldc) {
  zblock<true>(rows, cols, k, a, lda, b, 0, off, bias, c, ldc);
}

}  // namespace rlx::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64 GCC/clang: conv_zmm_enabled() is false

namespace rlx::cpu {
void conv_gemm_block_avx512(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, const float*,
                            float*, int64_t) {}
void conv_direct_block_avx512(int64_t, int64_t, int64_t, const float*, int64_t, const float*, const int32_t*,
                              const float*, float*, int64_t) {}
}  // namespace rlx::cpu

#endif
