// The AVX2 tile of int_gemm.h: up to 6 rows x 16 columns in 12 ymm accumulators of 8 i32. Per
// pair of k: two 16-value loads of the panel (8 columns x 2 k each), then per row the row's
// (k, k+1) weights broadcast as one 32-bit word and one vpmaddwd per 8 columns (a0 b0 + a1 b1 in
// 32 bits, exact for values in [-255, 255]) added with vpaddd (wrapping, as the portable tile).
// Everything between the pragmas is compiled for AVX2 and only called after
// int_gemm_avx2_usable(); the packing's AVX2 row helpers (widening with the zero point
// subtracted, pair interleaving) live here too, and the VNNI variant of the tile (vpdpwssd) is
// compiled for AVX-512 VNNI + VL and only called after int_gemm_vnni_usable().
#include <cstdint>
#include <cstring>
#include <type_traits>

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

bool int_gemm_vnni_usable() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
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

template <class T>
inline __attribute__((always_inline)) void widen(const T* src, int64_t n, int zero, int16_t* dst) {
  const __m256i z = _mm256_set1_epi16(static_cast<int16_t>(zero));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = std::is_same_v<T, uint8_t> ? _mm256_cvtepu8_epi16(v) : _mm256_cvtepi8_epi16(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_sub_epi16(w, z));
  }
  for (; i < n; ++i) dst[i] = static_cast<int16_t>(src[i] - zero);
}

}  // namespace

void int_widen_avx2(const uint8_t* src, int64_t n, int zero, int16_t* dst) { widen(src, n, zero, dst); }
void int_widen_avx2(const int8_t* src, int64_t n, int zero, int16_t* dst) { widen(src, n, zero, dst); }

void int_interleave_avx2(const int16_t* r0, const int16_t* r1, int64_t panels, int64_t kp, int64_t p, int16_t* dst) {
  for (int64_t q = 0; q < panels; ++q) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + q * kIntCols));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + q * kIntCols));
    // unpack works within 128-bit lanes: lo = pairs 0-3 | 8-11, hi = pairs 4-7 | 12-15.
    const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
    int16_t* d = dst + (q * kp + p) * kIntCols * 2;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

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

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,avx512vl,avx512vnni")
#endif

namespace rlx::cpu {
namespace {

// The AVX2 tile with vpdpwssd: acc += a0 b0 + a1 b1 per 32-bit lane in one instruction (no
// saturation: the wrapping sum of the AVX2 tile).
template <int MR>
inline __attribute__((always_inline)) void tile_vnni(int64_t cols, int64_t kp, const int16_t* a, const int16_t* b,
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
      acc[r][0] = _mm256_dpwssd_epi32(acc[r][0], av, b0);
      acc[r][1] = _mm256_dpwssd_epi32(acc[r][1], av, b1);
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

void int_tile_vnni(int64_t rows, int64_t cols, int64_t kp, const int16_t* a, const int16_t* b, int32_t* c,
                   int64_t ldc) {
  switch (rows) {
    case 6: return tile_vnni<6>(cols, kp, a, b, c, ldc);
    case 5: return tile_vnni<5>(cols, kp, a, b, c, ldc);
    case 4: return tile_vnni<4>(cols, kp, a, b, c, ldc);
    case 3: return tile_vnni<3>(cols, kp, a, b, c, ldc);
    case 2: return tile_vnni<2>(cols, kp, a, b, c, ldc);
    case 1: return tile_vnni<1>(cols, kp, a, b, c, ldc);
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
bool int_gemm_vnni_usable() { return false; }
void int_tile_avx2(int64_t rows, int64_t cols, int64_t kp, const int16_t* a, const int16_t* b, int32_t* c,
                   int64_t ldc) {
  int_tile_portable(rows, cols, kp, a, b, c, ldc);
}
void int_tile_vnni(int64_t rows, int64_t cols, int64_t kp, const int16_t* a, const int16_t* b, int32_t* c,
                   int64_t ldc) {
  int_tile_portable(rows, cols, kp, a, b, c, ldc);
}
void int_widen_avx2(const uint8_t* src, int64_t n, int zero, int16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int16_t>(src[i] - zero);
}
void int_widen_avx2(const int8_t* src, int64_t n, int zero, int16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int16_t>(src[i] - zero);
}
void int_interleave_avx2(const int16_t* r0, const int16_t* r1, int64_t panels, int64_t kp, int64_t p, int16_t* dst) {
  for (int64_t q = 0; q < panels; ++q)
    for (int64_t j = 0; j < kIntCols; ++j) {
      dst[(q * kp + p) * kIntCols * 2 + 2 * j] = r0[q * kIntCols + j];
      dst[(q * kp + p) * kIntCols * 2 + 2 * j + 1] = r1[q * kIntCols + j];
    }
}
}  // namespace rlx::cpu

#endif
