// attention_small.h: the score and value products of a few query rows on AVX2 + FMA lanes.
// Scores: 8 keys at a time, each key's products over d in one vector accumulator, the 8
// accumulators reduced to one vector of 8 scores by a horizontal-add tree. Values: a query row's
// output in chunks of 64 values (8 accumulators), every key's row added with its weight.
// Compiled for AVX2 + FMA (the pragma below; no standard-library templates between the pragmas),
// called only after small_products_native().
#include "backends/cpu/attention_small.h"

#include "backends/cpu/vec_math.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

namespace rlx::cpu::attn {
bool small_products_native(int64_t d) {
  static const bool fma = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") != 0;
  }();
  return d > 0 && d % 8 == 0 && vec::has_avx2() && fma;
}
}  // namespace rlx::cpu::attn

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace rlx::cpu::attn {
namespace {

inline __attribute__((always_inline)) float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane i: the sum of a[i]'s 8 lanes.
inline __attribute__((always_inline)) __m256 sum8x8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

}  // namespace

void small_qk(int64_t rows, int64_t ncol, int64_t d, float scale, const float* q, int64_t q_ld, const float* k,
              int64_t k_ld, float* s, int64_t ld) {
  const __m256 sc = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= ncol; j += 8) {
    const float* kb = k + j * k_ld;
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + r * q_ld;
      __m256 acc[8];
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_ps();
      for (int64_t e = 0; e < d; e += 8) {
        const __m256 qv = _mm256_loadu_ps(qr + e);
        for (int t = 0; t < 8; ++t) acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(kb + t * k_ld + e), qv, acc[t]);
      }
      _mm256_storeu_ps(s + r * ld + j, _mm256_mul_ps(sum8x8(acc), sc));
    }
  }
  for (; j < ncol; ++j) {
    const float* kj = k + j * k_ld;
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + r * q_ld;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t e = 0; e < d; e += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(kj + e), _mm256_loadu_ps(qr + e), acc);
      s[r * ld + j] = hsum(acc) * scale;
    }
  }
}

void small_pv(int64_t rows, int64_t d, int64_t ncol, const float* s, int64_t ld, const float* v, int64_t v_ld,
              float* o, int64_t o_ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* sr = s + r * ld;
    for (int64_t e0 = 0; e0 < d; e0 += 64) {
      const int64_t nv = (d - e0) / 8 < 8 ? (d - e0) / 8 : 8;
      __m256 acc[8];
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
      if (nv == 8) {
        for (int64_t j = 0; j < ncol; ++j) {
          const __m256 p = _mm256_set1_ps(sr[j]);
          const float* vj = v + j * v_ld + e0;
          for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
        }
      } else {
        for (int64_t j = 0; j < ncol; ++j) {
          const __m256 p = _mm256_set1_ps(sr[j]);
          const float* vj = v + j * v_ld + e0;
          for (int64_t c = 0; c < nv; ++c) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
        }
      }
      for (int64_t c = 0; c < nv; ++c) _mm256_storeu_ps(o + r * o_ld + e0 + 8 * c, acc[c]);
    }
  }
}

}  // namespace rlx::cpu::attn

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

namespace rlx::cpu::attn {
bool small_products_native(int64_t) { return false; }
void small_qk(int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float*, int64_t) {}
void small_pv(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t) {}
}  // namespace rlx::cpu::attn

#endif
