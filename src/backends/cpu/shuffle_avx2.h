#pragma once
// Internal to the CPU backend's AVX2 files: lane shuffles shared by its kernels (8 x 8 float
// transposes, the even or odd floats of two vectors), compiled for AVX / AVX2 and always inlined into
// the AVX2 functions that call them.
#include <immintrin.h>

#include <cstdint>

namespace rlx::cpu::avx2 {

// r[i] (row i of an 8 x 8 block) becomes column i.
inline __attribute__((always_inline, target("avx"))) void transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// The 8 x 8 block at a (rows lda apart) transposed into d (rows ldd apart).
inline __attribute__((always_inline, target("avx"))) void transpose8(const float* a, int64_t lda, float* d,
                                                                   int64_t ldd) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(a + i * lda);
  transpose8(r);
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(d + i * ldd, r[i]);
}

// The even floats of lo:hi (16 consecutive floats): lo0 lo2 lo4 lo6 hi0 hi2 hi4 hi6, a stride-2
// row's 8 values.
inline __attribute__((always_inline, target("avx2"))) __m256 even_floats(__m256 lo, __m256 hi) {
  const __m256 ev = _mm256_shuffle_ps(lo, hi, 0x88);  // lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8));
}

// The odd floats of lo:hi: lo1 lo3 lo5 lo7 hi1 hi3 hi5 hi7.
inline __attribute__((always_inline, target("avx2"))) __m256 odd_floats(__m256 lo, __m256 hi) {
  const __m256 od = _mm256_shuffle_ps(lo, hi, 0xDD);  // lo1 lo3 hi1 hi3 | lo5 lo7 hi5 hi7
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8));
}

}  // namespace rlx::cpu::avx2
