// f32 row kernels on vector lanes: each body is an always-inline template instantiated for 4
// lanes (any x86-64) and for 8 lanes inside an AVX2 function; the entry points pick one per call.
// Also the bulk f16 <-> f32 conversions (F16C).
#include "backends/cpu/vec_rows.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/vec_formula.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // 8-lane bodies only run inlined in AVX2 functions (vec_math.h)

namespace rlx::cpu {

namespace vec {
bool has_avx2() {
#if RLX_VEC_X86
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
#else
  return false;
#endif
}
bool has_f16c() {
#if RLX_VEC_X86
  static const bool yes = [] {
    // CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no "f16c").
    unsigned a = 0, b = 0, c = 0, d = 0;
    return has_avx2() && __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
  }();
  return yes;
#else
  return false;
#endif
}
}  // namespace vec

namespace {

#if RLX_VEC_X86
__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const f16* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = f16_bits_to_f32(x[i].bits);
}
__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* x, f16* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i].bits = f32_to_f16_bits(x[i]);
}
#endif

using vec::kLanes;
using vec::Lanes;

// The two halves of a vector as double vectors.
template <class V> RLX_VEC_INLINE typename Lanes<V>::D lo_wide(const V& v) {
  typename Lanes<V>::H h;
  std::memcpy(&h, &v, sizeof h);
  return __builtin_convertvector(h, typename Lanes<V>::D);
}
template <class V> RLX_VEC_INLINE typename Lanes<V>::D hi_wide(const V& v) {
  typename Lanes<V>::H h;
  std::memcpy(&h, reinterpret_cast<const char*>(&v) + sizeof h, sizeof h);
  return __builtin_convertvector(h, typename Lanes<V>::D);
}

// y = Op(x) over n floats; the tail goes through one padded vector, so every element gets the
// same arithmetic wherever it sits.
template <class V, class Op> RLX_VEC_INLINE void map_span(const float* x, float* y, int64_t n) {
  constexpr int L = kLanes<V>;
  int64_t i = 0;
  for (; i + L <= n; i += L) vec::store(y + i, Op::apply(vec::load<V>(x + i)));
  if (i < n) {
    float buf[L] = {};
    const size_t rest = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(buf, x + i, rest);
    vec::store(buf, Op::apply(vec::load<V>(buf)));
    std::memcpy(y + i, buf, rest);
  }
}

struct ExpOp {
  template <class V> static RLX_VEC_INLINE V apply(const V& v) { return vec::exp(v); }
};
struct TanhOp {
  template <class V> static RLX_VEC_INLINE V apply(const V& v) { return vec::tanh(v); }
};
struct ErfOp {
  template <class V> static RLX_VEC_INLINE V apply(const V& v) { return vec::erf(v); }
};
template <ActKind K> struct ActOp {
  template <class V> static RLX_VEC_INLINE V apply(const V& v) { return eval_activation<K>(v); }
};

inline void max_step(float& m, float v) {
  if (v > m || v != v) m = v;
}

template <class V> RLX_VEC_INLINE void softmax_row(const float* x, float* y, int64_t n, bool log) {
  using D = typename Lanes<V>::D;
  using H = typename Lanes<V>::H;
  constexpr int L = kLanes<V>, W = L / 2;
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  V vm = vec::splat<V>(ninf);
  int64_t i = 0;
  for (; i + L <= n; i += L) vm = vec::max_nan(vm, vec::load<V>(x + i));
  float m = ninf;
  for (int k = 0; k < L; ++k) max_step(m, vm[k]);
  for (; i < n; ++i) max_step(m, x[i]);
  const V vmx = vec::splat<V>(m);
  D s0 = D{}, s1 = D{};
  i = 0;
  for (; i + L <= n; i += L) {
    const V e = vec::exp(vec::load<V>(x + i) - vmx);
    if (!log) vec::store(y + i, e);
    s0 += lo_wide(e);
    s1 += hi_wide(e);
  }
  double sum = vec::hsum(s0 + s1);
  if (i < n) {
    float buf[L];
    for (int k = 0; k < L; ++k) buf[k] = i + k < n ? x[i + k] : m;
    vec::store(buf, vec::exp(vec::load<V>(buf) - vmx));
    for (int64_t k = 0; i + k < n; ++k) {
      sum += static_cast<double>(buf[k]);
      if (!log) y[i + k] = buf[k];
    }
  }
  int64_t j = 0;
  if (log) {
    const double ls = std::log(sum);
    const H hm = H{} + m;
    for (; j + W <= n; j += W) {
      H h;
      std::memcpy(&h, x + j, sizeof h);
      vec::store_narrow<V>(y + j, __builtin_convertvector(h - hm, D) - ls);
    }
    for (; j < n; ++j) y[j] = static_cast<float>(static_cast<double>(x[j] - m) - ls);
  } else {
    const double inv = 1.0 / sum;
    for (; j + W <= n; j += W) vec::store_narrow<V>(y + j, vec::load_wide<V>(y + j) * inv);
    for (; j < n; ++j) y[j] = static_cast<float>(static_cast<double>(y[j]) * inv);
  }
}

// Softmax over a non-last axis: n adjacent columns, mid rows `stride` floats apart. Per column
// the same arithmetic as softmax_row (f32 exp of x - max, double sum, one rounding).
template <class V> RLX_VEC_INLINE void softmax_cols(const float* x, float* y, int64_t mid, int64_t stride, int64_t n,
                                                    bool log, float* mx, double* sum) {
  using D = typename Lanes<V>::D;
  using H = typename Lanes<V>::H;
  constexpr int L = kLanes<V>, W = L / 2;
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const int64_t full = n / L * L;
  for (int64_t j = 0; j < n; ++j) mx[j] = ninf, sum[j] = 0.0;
  for (int64_t m = 0; m < mid; ++m) {
    const float* r = x + m * stride;
    int64_t j = 0;
    for (; j < full; j += L) vec::store(mx + j, vec::max_nan(vec::load<V>(mx + j), vec::load<V>(r + j)));
    for (; j < n; ++j) max_step(mx[j], r[j]);
  }
  float buf[L], mbuf[L];
  for (int64_t m = 0; m < mid; ++m) {
    const float* r = x + m * stride;
    float* d = y + m * stride;
    int64_t j = 0;
    for (; j < full; j += L) {
      const V e = vec::exp(vec::load<V>(r + j) - vec::load<V>(mx + j));
      if (!log) vec::store(d + j, e);
      vec::store_wide<V>(sum + j, vec::load_wide<V>(sum + j) + lo_wide(e));
      vec::store_wide<V>(sum + j + W, vec::load_wide<V>(sum + j + W) + hi_wide(e));
    }
    if (j < n) {
      for (int k = 0; k < L; ++k) buf[k] = j + k < n ? r[j + k] : 0.0f, mbuf[k] = j + k < n ? mx[j + k] : 0.0f;
      vec::store(buf, vec::exp(vec::load<V>(buf) - vec::load<V>(mbuf)));
      for (int64_t k = 0; j + k < n; ++k) {
        sum[j + k] += static_cast<double>(buf[k]);
        if (!log) d[j + k] = buf[k];
      }
    }
  }
  if (log)
    for (int64_t j = 0; j < n; ++j) sum[j] = std::log(sum[j]);
  else
    for (int64_t j = 0; j < n; ++j) sum[j] = 1.0 / sum[j];
  for (int64_t m = 0; m < mid; ++m) {
    const float* r = x + m * stride;
    float* d = y + m * stride;
    int64_t j = 0;
    if (log) {
      for (; j + W <= n; j += W) {
        H h, hm;
        std::memcpy(&h, r + j, sizeof h);
        std::memcpy(&hm, mx + j, sizeof hm);
        vec::store_narrow<V>(d + j, __builtin_convertvector(h - hm, D) - vec::load_wide<V>(sum + j));
      }
      for (; j < n; ++j) d[j] = static_cast<float>(static_cast<double>(r[j] - mx[j]) - sum[j]);
    } else {
      for (; j + W <= n; j += W) vec::store_narrow<V>(d + j, vec::load_wide<V>(d + j) * vec::load_wide<V>(sum + j));
      for (; j < n; ++j) d[j] = static_cast<float>(static_cast<double>(d[j]) * sum[j]);
    }
  }
}

// v_j in double: x_j, or round_f32(x_j + res_j).
template <class V> RLX_VEC_INLINE typename Lanes<V>::D norm_value(const float* x, const float* res, int64_t j) {
  using H = typename Lanes<V>::H;
  H h;
  std::memcpy(&h, x + j, sizeof h);
  if (res) {
    H r;
    std::memcpy(&r, res + j, sizeof r);
    h = h + r;
  }
  return __builtin_convertvector(h, typename Lanes<V>::D);
}
inline double norm_value1(const float* x, const float* res, int64_t j) {
  return static_cast<double>(res ? x[j] + res[j] : x[j]);
}

template <class V> RLX_VEC_INLINE void norm_row(const float* x, const float* res, const double* gamma,
                                                const double* beta, float* y, int64_t len, double eps, bool rms) {
  using D = typename Lanes<V>::D;
  constexpr int W = kLanes<V> / 2;
  double mean = 0.0;
  if (!rms) {
    D a0 = D{}, a1 = D{};
    int64_t j = 0;
    for (; j + 2 * W <= len; j += 2 * W) {
      a0 += norm_value<V>(x, res, j);
      a1 += norm_value<V>(x, res, j + W);
    }
    double s = vec::hsum(a0 + a1);
    for (; j < len; ++j) s += norm_value1(x, res, j);
    mean = s / static_cast<double>(len);
  }
  D q0 = D{}, q1 = D{};
  int64_t j = 0;
  for (; j + 2 * W <= len; j += 2 * W) {
    const D d0 = norm_value<V>(x, res, j) - mean, d1 = norm_value<V>(x, res, j + W) - mean;
    q0 += d0 * d0;
    q1 += d1 * d1;
  }
  double sq = vec::hsum(q0 + q1);
  for (; j < len; ++j) {
    const double d = norm_value1(x, res, j) - mean;
    sq += d * d;
  }
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(len) + eps);
  j = 0;
  for (; j + W <= len; j += W) {
    D o = (norm_value<V>(x, res, j) - mean) * inv * vec::load_wide<V>(gamma + j);
    if (beta) o += vec::load_wide<V>(beta + j);
    vec::store_narrow<V>(y + j, o);
  }
  for (; j < len; ++j) {
    double o = (norm_value1(x, res, j) - mean) * inv * gamma[j];
    if (beta) o += beta[j];
    y[j] = static_cast<float>(o);
  }
}

// The sum of n floats in double, four accumulators of W lanes.
template <class V> RLX_VEC_INLINE double sum_row(const float* x, int64_t n) {
  using D = typename Lanes<V>::D;
  constexpr int W = kLanes<V> / 2;
  D a0 = D{}, a1 = D{}, a2 = D{}, a3 = D{};
  int64_t j = 0;
  for (; j + 4 * W <= n; j += 4 * W) {
    a0 += norm_value<V>(x, nullptr, j);
    a1 += norm_value<V>(x, nullptr, j + W);
    a2 += norm_value<V>(x, nullptr, j + 2 * W);
    a3 += norm_value<V>(x, nullptr, j + 3 * W);
  }
  for (; j + W <= n; j += W) a0 += norm_value<V>(x, nullptr, j);
  double s = vec::hsum((a0 + a1) + (a2 + a3));
  for (; j < n; ++j) s += static_cast<double>(x[j]);
  return s;
}

// The max (or min) of n floats, NaN propagating: each lane keeps x when x is beyond it or NaN,
// and a lane holding NaN keeps it.
template <class V, bool Max> RLX_VEC_INLINE V take_extreme(const V& m, const V& v) {
  if constexpr (Max) return vec::select<V>((v > m) | (v != v), v, m);
  else return vec::select<V>((v < m) | (v != v), v, m);
}
template <bool Max> inline bool beyond(float v, float r) { return (Max ? v > r : v < r) || v != v; }
template <class V, bool Max> RLX_VEC_INLINE float extreme_row(const float* x, int64_t n) {
  constexpr int L = kLanes<V>;
  float r = x[0];
  int64_t j = 0;
  if (n >= 2 * L) {
    V m0 = vec::load<V>(x), m1 = vec::load<V>(x + L);
    for (j = 2 * L; j + 2 * L <= n; j += 2 * L) {
      m0 = take_extreme<V, Max>(m0, vec::load<V>(x + j));
      m1 = take_extreme<V, Max>(m1, vec::load<V>(x + j + L));
    }
    const V m = take_extreme<V, Max>(m0, m1);
    r = m[0];
    for (int l = 1; l < L; ++l)
      if (beyond<Max>(m[l], r)) r = m[l];
  }
  for (; j < n && r == r; ++j)
    if (beyond<Max>(x[j], r)) r = x[j];
  return r;
}

// ---- the two instantiations of each body ----

void softmax4(const float* x, float* y, int64_t n, bool log) { softmax_row<vec::f32x4>(x, y, n, log); }
void softmax_cols4(const float* x, float* y, int64_t mid, int64_t stride, int64_t n, bool log, float* mx,
                   double* sum) {
  softmax_cols<vec::f32x4>(x, y, mid, stride, n, log, mx, sum);
}
void norm4(const float* x, const float* r, const double* g, const double* b, float* y, int64_t len, double eps,
           bool rms) {
  norm_row<vec::f32x4>(x, r, g, b, y, len, eps, rms);
}
template <class Op> void map4(const float* x, float* y, int64_t n) { map_span<vec::f32x4, Op>(x, y, n); }
double sum4(const float* x, int64_t n) { return sum_row<vec::f32x4>(x, n); }
float extreme4(const float* x, int64_t n, bool max) {
  return max ? extreme_row<vec::f32x4, true>(x, n) : extreme_row<vec::f32x4, false>(x, n);
}

#if RLX_VEC_X86
RLX_VEC_AVX2 void softmax8(const float* x, float* y, int64_t n, bool log) { softmax_row<vec::f32x8>(x, y, n, log); }
RLX_VEC_AVX2 void softmax_cols8(const float* x, float* y, int64_t mid, int64_t stride, int64_t n, bool log, float* mx,
                                double* sum) {
  softmax_cols<vec::f32x8>(x, y, mid, stride, n, log, mx, sum);
}
RLX_VEC_AVX2 void norm8(const float* x, const float* r, const double* g, const double* b, float* y, int64_t len,
                        double eps, bool rms) {
  norm_row<vec::f32x8>(x, r, g, b, y, len, eps, rms);
}
template <class Op> RLX_VEC_AVX2 void map8(const float* x, float* y, int64_t n) { map_span<vec::f32x8, Op>(x, y, n); }
RLX_VEC_AVX2 double sum8(const float* x, int64_t n) { return sum_row<vec::f32x8>(x, n); }
RLX_VEC_AVX2 float extreme8(const float* x, int64_t n, bool max) {
  return max ? extreme_row<vec::f32x8, true>(x, n) : extreme_row<vec::f32x8, false>(x, n);
}
#endif

template <class Op> void map_f32(const float* x, float* y, int64_t n, bool force_narrow) {
#if RLX_VEC_X86
  if (!force_narrow && vec::has_avx2()) return map8<Op>(x, y, n);
#endif
  (void)force_narrow;
  map4<Op>(x, y, n);
}

}  // namespace

void softmax_row_f32(const float* x, float* y, int64_t n, bool log) {
  if (n <= 0) return;
#if RLX_VEC_X86
  if (vec::has_avx2()) return softmax8(x, y, n, log);
#endif
  softmax4(x, y, n, log);
}

void softmax_cols_f32(const float* x, float* y, int64_t mid, int64_t stride, int64_t n, bool log) {
  if (mid <= 0 || n <= 0) return;
  std::vector<float> mx(static_cast<size_t>(n));
  std::vector<double> sum(static_cast<size_t>(n));
#if RLX_VEC_X86
  if (vec::has_avx2()) return softmax_cols8(x, y, mid, stride, n, log, mx.data(), sum.data());
#endif
  softmax_cols4(x, y, mid, stride, n, log, mx.data(), sum.data());
}

double sum_f32(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
#if RLX_VEC_X86
  if (vec::has_avx2()) return sum8(x, n);
#endif
  return sum4(x, n);
}

float extreme_f32(const float* x, int64_t n, bool max) {
#if RLX_VEC_X86
  if (vec::has_avx2()) return extreme8(x, n, max);
#endif
  return extreme4(x, n, max);
}

void norm_row_f32(const float* x, const float* res, const double* gamma, const double* beta, float* y, int64_t len,
                  double eps, bool rms) {
  if (len <= 0) return;
#if RLX_VEC_X86
  if (vec::has_avx2()) return norm8(x, res, gamma, beta, y, len, eps, rms);
#endif
  norm4(x, res, gamma, beta, y, len, eps, rms);
}

bool activation_f32(ActKind k, const float* x, float* y, int64_t n) {
  switch (k) {
#define RLX_VEC_ACT(K)                                        \
  case ActKind::K:                                            \
    if constexpr (vectorized_activation<ActKind::K>()) {      \
      map_f32<ActOp<ActKind::K>>(x, y, n, false);             \
      return true;                                            \
    }                                                         \
    return false;
    RLX_FLOAT_ACTIVATIONS(RLX_VEC_ACT)
#undef RLX_VEC_ACT
    default: return false;
  }
}

void f16_to_f32(const f16* x, float* y, int64_t n, bool force_scalar) {
#if RLX_VEC_X86
  if (!force_scalar && vec::has_f16c()) return f16_to_f32_f16c(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = f16_bits_to_f32(x[i].bits);
}

void f32_to_f16(const float* x, f16* y, int64_t n, bool force_scalar) {
#if RLX_VEC_X86
  if (!force_scalar && vec::has_f16c()) return f32_to_f16_f16c(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i].bits = f32_to_f16_bits(x[i]);
}

void exp_f32(const float* x, float* y, int64_t n, bool force_narrow) { map_f32<ExpOp>(x, y, n, force_narrow); }
void tanh_f32(const float* x, float* y, int64_t n, bool force_narrow) { map_f32<TanhOp>(x, y, n, force_narrow); }
void erf_f32(const float* x, float* y, int64_t n, bool force_narrow) { map_f32<ErfOp>(x, y, n, force_narrow); }

}  // namespace rlx::cpu
