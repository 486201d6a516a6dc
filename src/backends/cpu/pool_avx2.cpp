// f32 max pooling on AVX2 lanes (pool_avx2.h), 8 output columns per vector: the separable passes
// for rows without NaN (each input row's x taps by vmaxps, then the rows combined), and one
// output row over all its taps with the NaN rule (the running maxima in a register; taps over
// the padding are masked loads whose lanes become -inf; stride 2: the even floats of two loads,
// gathered by one shuffle and one lane permute). Compiled for AVX2 between the pragmas; only
// called when vec::has_avx2().
#include "backends/cpu/pool_avx2.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/shuffle_avx2.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace rlx::cpu {
namespace {

#define RLX_POOL_INLINE inline __attribute__((always_inline))

// m where v is neither greater nor NaN, else v.
inline __m256 take(__m256 m, __m256 v) {
  const __m256 pick = _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_ps(m, v, pick);
}

// Lanes whose column c0 + step * lane lies in [0, iw) and whose output ox0 + lane < ow.
inline __m256i valid_lanes(int64_t c0, int64_t step, int64_t iw, int64_t ox0, int64_t ow) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i col = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(c0)),
                                       _mm256_mullo_epi32(lane, _mm256_set1_epi32(static_cast<int>(step))));
  const __m256i in_row = _mm256_and_si256(_mm256_cmpgt_epi32(col, _mm256_set1_epi32(-1)),
                                          _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(iw)), col));
  return _mm256_and_si256(in_row, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(ow - ox0)), lane));
}

}  // namespace

void max_pool_row_avx2(const float* const* rows, int64_t n_rows, int64_t iw, int64_t ow, int64_t kw, int64_t sx,
                       int64_t px, int64_t dx, float* y) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i even = _mm256_cmpeq_epi32(_mm256_and_si256(lane, _mm256_set1_epi32(1)), _mm256_setzero_si256());
  // Per 8 outputs and kx: the output lanes inside the row, and (stride 2) the load masks of
  // floats 0..7 and 8..15 from column c0 (even floats of valid outputs only). The same for
  // every row of a pooling: kept per thread for the geometry it was made for.
  struct Tap {
    int64_t c0;
    bool full;  // all 8 outputs inside the row, and plain loads stay inside it
    int32_t out[8], lo[8], hi[8];  // masks (plain arrays: the vector's storage is not 32-byte aligned)
  };
  thread_local std::vector<Tap> tap_store;
  thread_local std::vector<int64_t> chunk_taps;  // taps of chunk i: [chunk_taps[i], chunk_taps[i + 1])
  thread_local int64_t key[6] = {-1, -1, -1, -1, -1, -1};
  const int64_t want[6] = {iw, ow, kw, sx, px, dx};
  if (!std::equal(want, want + 6, key)) {
    tap_store.clear();
    chunk_taps.assign(1, 0);
    for (int64_t ox0 = 0; ox0 < ow; ox0 += 8) {
      for (int64_t kx = 0; kx < kw; ++kx) {
        Tap t;
        t.c0 = ox0 * sx - px + kx * dx;
        const __m256i out = valid_lanes(t.c0, sx, iw, ox0, ow);
        if (_mm256_testz_si256(out, out)) continue;  // every lane over the padding: -inf
        t.full = _mm256_movemask_ps(_mm256_castsi256_ps(out)) == 0xFF && t.c0 + 8 * sx <= iw;
        __m256i lo = _mm256_setzero_si256(), hi = lo;
        if (sx == 2) {
          lo = _mm256_and_si256(even, valid_lanes(t.c0, 1, iw, 2 * ox0, 2 * ow));
          hi = _mm256_and_si256(even, valid_lanes(t.c0 + 8, 1, iw, 2 * ox0 + 8, 2 * ow));
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(t.out), out);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(t.lo), lo);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(t.hi), hi);
        tap_store.push_back(t);
      }
      chunk_taps.push_back(static_cast<int64_t>(tap_store.size()));
    }
    std::copy(want, want + 6, key);
  }
  const Tap* const taps = tap_store.data();  // (one thread-local lookup, not one per tap)
  const int64_t* const bounds = chunk_taps.data();
  for (int64_t ox0 = 0, chunk = 0; ox0 < ow; ox0 += 8, ++chunk) {
    const int64_t t_begin = bounds[chunk], t_end = bounds[chunk + 1];
    __m256 m = ninf;
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* row = rows[r];
      for (int64_t i = t_begin; i < t_end; ++i) {
        const Tap& t = taps[i];
        __m256 v;
        if (t.full) {
          if (sx == 1) {
            v = _mm256_loadu_ps(row + t.c0);
          } else {
            v = avx2::even_floats(_mm256_loadu_ps(row + t.c0), _mm256_loadu_ps(row + t.c0 + 8));
          }
          m = take(m, v);
          continue;
        }
        const __m256i out = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.out));
        if (sx == 1) {
          v = _mm256_maskload_ps(row + t.c0, out);
        } else {
          const __m256 a = _mm256_maskload_ps(row + t.c0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.lo)));
          const __m256 b = _mm256_maskload_ps(row + t.c0 + 8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.hi)));
          v = avx2::even_floats(a, b);
        }
        m = take(m, _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(out)));
      }
    }
    if (ox0 + 8 <= ow) _mm256_storeu_ps(y + ox0, m);
    else _mm256_maskstore_ps(y + ox0, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(ow - ox0)), lane), m);
  }
}

namespace {

// 8 floats of a row from column col on; with Edge, lanes outside [0, iw) are -inf (and not read).
template <bool Edge>
RLX_POOL_INLINE __m256 row_load(const float* row, int64_t col, int64_t iw) {
  if constexpr (!Edge) {
    return _mm256_loadu_ps(row + col);
  } else {
    const __m256i c = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(col)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(c, _mm256_set1_epi32(-1)),
                                        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(iw)), c));
    return _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), _mm256_maskload_ps(row + col, in),
                            _mm256_castsi256_ps(in));
  }
}

// The maxima of 8 outputs whose first column is `first`, taps kx < kw at kx * dx, in kx order;
// KW > 0: kw == KW and dx == 1 (the common windows, unrolled: stride 2 loads each pair of 16
// floats once for two taps). SX == 2 returns the lanes in shufps order (0 1 4 5 2 3 6 7 of the
// outputs). NaN lanes of the loaded vectors are or-ed into nan.
template <int SX, int KW, bool Edge>
RLX_POOL_INLINE __m256 tap_max(const float* row, int64_t first, int64_t iw, int64_t kw, int64_t dx, __m256& nan) {
  const auto at = [&](int64_t off) { return row_load<Edge>(row, first + off, iw); };
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  if constexpr (SX == 1 && KW > 0) {
    for (int c = 0; c < KW; c += 2) {
      const __m256 v0 = at(c);
      const __m256 v1 = c + 1 < KW ? at(c + 1) : v0;
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
      m = _mm256_max_ps(v0, m);
      if (c + 1 < KW) m = _mm256_max_ps(v1, m);
    }
  } else if constexpr (SX == 1) {
    for (int64_t kx = 0; kx < kw; ++kx) {
      const __m256 v = at(kx * dx);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m = _mm256_max_ps(v, m);
    }
  } else if constexpr (KW > 0) {
    for (int c = 0; c < KW; c += 2) {
      const __m256 lo = at(c), hi = at(c + 8);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(lo, hi, _CMP_UNORD_Q));
      m = _mm256_max_ps(_mm256_shuffle_ps(lo, hi, 0x88), m);
      if (c + 1 < KW) m = _mm256_max_ps(_mm256_shuffle_ps(lo, hi, 0xDD), m);
    }
  } else {
    for (int64_t kx = 0; kx < kw; ++kx) {
      const int64_t c = kx * dx, even = c & ~int64_t{1};
      const __m256 lo = at(even), hi = at(even + 8);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(lo, hi, _CMP_UNORD_Q));
      m = _mm256_max_ps(c & 1 ? _mm256_shuffle_ps(lo, hi, 0xDD) : _mm256_shuffle_ps(lo, hi, 0x88), m);
    }
  }
  return m;
}

// Vectors of 8 outputs, each tap a load at the vector's first column (stride 2: the even or odd
// floats of 16 loaded from an even column; the lane order of one shufps is the same for every
// tap, so the maxima are put in order once at the end). A vector whose loads would leave the row
// masks them, -inf outside it. NaNs are looked for in every loaded vector.
template <int SX, int KW>
bool hrow(const float* row, int64_t iw, int64_t ow, int64_t kw, int64_t px, int64_t dx, float* h) {
  const int64_t reach = (kw - 1) * dx + 8 * SX;  // floats from a vector's first column
  __m256 nan = _mm256_setzero_ps();
  for (int64_t ox = 0; ox < ow; ox += 8) {
    const int64_t first = ox * SX - px;
    const __m256 m = first < 0 || first + reach > iw ? tap_max<SX, KW, true>(row, first, iw, kw, dx, nan)
                                                     : tap_max<SX, KW, false>(row, first, iw, kw, dx, nan);
    if constexpr (SX == 1) _mm256_storeu_ps(h + ox, m);
    else _mm256_storeu_ps(h + ox, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m), 0xD8)));
  }
  return _mm256_testz_ps(nan, nan);
}

}  // namespace

bool max_pool_hrow_avx2(const float* row, int64_t iw, int64_t ow, int64_t kw, int64_t sx, int64_t px, int64_t dx,
                        float* h) {
  // Column indices are formed in 32-bit lanes.
  if (iw >= (int64_t{1} << 31) - 8 * sx - (kw - 1) * dx || px >= (int64_t{1} << 30)) return false;
  if (sx == 1) {
    if (dx == 1 && kw == 2) return hrow<1, 2>(row, iw, ow, kw, px, dx, h);
    if (dx == 1 && kw == 3) return hrow<1, 3>(row, iw, ow, kw, px, dx, h);
    if (dx == 1 && kw == 5) return hrow<1, 5>(row, iw, ow, kw, px, dx, h);
    return hrow<1, 0>(row, iw, ow, kw, px, dx, h);
  }
  if (dx == 1 && kw == 2) return hrow<2, 2>(row, iw, ow, kw, px, dx, h);
  if (dx == 1 && kw == 3) return hrow<2, 3>(row, iw, ow, kw, px, dx, h);
  return hrow<2, 0>(row, iw, ow, kw, px, dx, h);
}

void max_pool_vrow_avx2(const float* const* rows, int64_t n, int64_t ow, float* y) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t ox = 0; ox < ow; ox += 8) {
    __m256 m = ninf;
    for (int64_t r = 0; r < n; ++r) m = _mm256_max_ps(_mm256_loadu_ps(rows[r] + ox), m);
    if (ox + 8 <= ow) {
      _mm256_storeu_ps(y + ox, m);
    } else {
      alignas(32) float t[8];
      _mm256_store_ps(t, m);
      std::copy(t, t + (ow - ox), y + ox);
    }
  }
}

bool max_pool_planes8_avx2(const float* x, int64_t in_plane, int64_t nch, const Window3& win, float* y,
                           int64_t out_plane, std::vector<float>& scratch) {
  const int64_t ih = win.in[1], iw = win.in[2], oh = win.out[1], ow = win.out[2];
  const int64_t sy = win.stride[1], sx = win.stride[2], py = win.pad[1], px = win.pad[2];
  const int64_t dy = win.dil[1], dx = win.dil[2], kh = win.k[1], kw = win.k[2];
  // The padded extent the windows read: rows and columns from -py / -px.
  const int64_t hp = win.read_extent(1), wp = win.read_extent(2);
  scratch.resize(static_cast<size_t>(hp * wp * 8));
  float* b = scratch.data();
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 nan = _mm256_setzero_ps();
  bool scalar_nan = false;
  const int64_t cols = std::clamp<int64_t>(wp - px, 0, iw);  // input columns the windows read
  for (int64_t r = 0; r < hp; ++r) {
    float* dst = b + r * wp * 8;
    const int64_t iy = r - py;
    if (iy < 0 || iy >= ih) {
      for (int64_t c = 0; c < wp; ++c) _mm256_storeu_ps(dst + c * 8, ninf);
      continue;
    }
    for (int64_t c = 0; c < std::min(px, wp); ++c) _mm256_storeu_ps(dst + c * 8, ninf);
    for (int64_t c = px + cols; c < wp; ++c) _mm256_storeu_ps(dst + c * 8, ninf);
    const float* src[8];
    for (int64_t ch = 0; ch < 8; ++ch) src[ch] = ch < nch ? x + ch * in_plane + iy * iw : nullptr;
    float* d = dst + px * 8;
    int64_t ix = 0;
    for (; ix + 8 <= cols; ix += 8) {
      __m256 v[8];
      for (int ch = 0; ch < 8; ++ch) {
        v[ch] = ch < nch ? _mm256_loadu_ps(src[ch] + ix) : ninf;
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[ch], v[ch], _CMP_UNORD_Q));
      }
      avx2::transpose8(v);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(d + (ix + i) * 8, v[i]);
    }
    for (; ix < cols; ++ix)
      for (int64_t ch = 0; ch < 8; ++ch) {
        const float val = ch < nch ? src[ch][ix] : -std::numeric_limits<float>::infinity();
        scalar_nan |= val != val;
        d[ix * 8 + ch] = val;
      }
  }
  if (scalar_nan || !_mm256_testz_ps(nan, nan)) return false;
  // Output pixels 8 at a time (along the flattened output plane), transposed into the planes.
  const int64_t n_out = oh * ow;
  for (int64_t q0 = 0; q0 < n_out; q0 += 8) {
    __m256 m[8];
    const int64_t nq = std::min<int64_t>(8, n_out - q0);
    const float* base[8];  // pixel j's window (pixels past the plane repeat the first: ignored)
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t q = q0 + (j < nq ? j : 0), oy = q / ow, ox = q % ow;
      base[j] = b + (oy * sy * wp + ox * sx) * 8;
      m[j] = ninf;
    }
    // Taps outer, pixels inner: eight independent chains of vmaxps in registers.
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t kx = 0; kx < kw; ++kx) {
        const int64_t off = (ky * dy * wp + kx * dx) * 8;
        for (int j = 0; j < 8; ++j) m[j] = _mm256_max_ps(_mm256_loadu_ps(base[j] + off), m[j]);
      }
    avx2::transpose8(m);
    for (int64_t ch = 0; ch < nch; ++ch) {
      float* out = y + ch * out_plane + q0;
      if (nq == 8) {
        _mm256_storeu_ps(out, m[ch]);
      } else {
        alignas(32) float t[8];
        _mm256_store_ps(t, m[ch]);
        std::copy(t, t + nq, out);
      }
    }
  }
  return true;
}

}  // namespace rlx::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64 GCC/clang: the scalar loop of max_pool_rows (vec::has_avx2() is false)

namespace rlx::cpu {
void max_pool_row_avx2(const float* const*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float*) {}
bool max_pool_hrow_avx2(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float*) {
  return false;
}
void max_pool_vrow_avx2(const float* const*, int64_t, int64_t, float*) {}
bool max_pool_planes8_avx2(const float*, int64_t, int64_t, const Window3&, float*, int64_t, std::vector<float>&) {
  return false;
}
}  // namespace rlx::cpu

#endif
