#pragma once
// Vectorized f32 math for the CPU kernels: exp, expm1, tanh, erf over lanes of GCC/Clang vector
// extensions, plus the lane helpers the row kernels use (load, store, select, horizontal sums).
//
// Every function is a template on the vector type. Kernels instantiate their bodies twice: with
// 4 lanes (16 bytes: SSE2 on any x86-64, the generic vector unit elsewhere) and with 8 lanes
// inside a function compiled for AVX2 (RLX_VEC_AVX2), chosen once at run time (has_avx2()).
// The code uses no fused multiply-add (the build does not contract a * b + c), so both paths
// compute the same bits: the oracle's numbers do not depend on the CPU it runs on.
//
// Accuracy (tests/ops/test_vec_math.cpp checks it against std::exp / std::tanh / std::erf over
// the whole float range, infinities, NaN and denormal results):
//   exp    at most 2 ulp (1 measured over every 97th float; denormal results round once);
//          exp(x) = 0 below -103.98, +inf above 88.73, NaN stays NaN.
//   expm1  for -20 <= x <= 0 as tanh uses it (no separate bound).
//   tanh   at most 3 ulp (measured the same way); -0 and denormals keep their value, +-1 from
//          |x| > 9.01.
//   erf    at most 3 ulp (measured the same way); -0 stays -0, +-1 from |x| >= 4, NaN stays NaN.
// Method: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 split in a part exact for |n| <= 255
// and a correction), e^r - 1 by its degree-8 Taylor polynomial in Horner form, and 2^n applied
// as two exact power-of-two factors so that results in the denormal and near-overflow ranges
// round once.
#include <cstdint>
#include <cstring>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define RLX_VEC_X86 1
// A function compiled for AVX2 (8-lane vectors in ymm registers); call it only when has_avx2().
#define RLX_VEC_AVX2 __attribute__((target("avx2")))
#else
#define RLX_VEC_X86 0
#define RLX_VEC_AVX2
#endif
#define RLX_VEC_INLINE inline __attribute__((always_inline))

// The 8-lane bodies are always inlined into AVX2 functions: no vector crosses a call boundary, so
// GCC's note that 32-byte vector arguments change the ABI without AVX does not apply to them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace rlx::cpu::vec {

using f32x4 = float __attribute__((vector_size(16)));
using u32x4 = uint32_t __attribute__((vector_size(16)));
using i32x4 = int32_t __attribute__((vector_size(16)));
using f64x2 = double __attribute__((vector_size(16)));
using f32x2 = float __attribute__((vector_size(8)));
using f32x8 = float __attribute__((vector_size(32)));
using u32x8 = uint32_t __attribute__((vector_size(32)));
using i32x8 = int32_t __attribute__((vector_size(32)));
using f64x4 = double __attribute__((vector_size(32)));

template <class V> struct Lanes;
template <> struct Lanes<f32x4> {
  static constexpr int n = 4;
  using U = u32x4;
  using I = i32x4;
  using D = f64x2;  // half the lanes, in double
  using H = f32x2;  // half the lanes, in float
};
template <> struct Lanes<f32x8> {
  static constexpr int n = 8;
  using U = u32x8;
  using I = i32x8;
  using D = f64x4;
  using H = f32x4;
};
template <class V> inline constexpr int kLanes = Lanes<V>::n;

// True when the CPU runs AVX2 (the 8-lane paths); has_f16c: AVX2 and F16C (f16 conversions).
bool has_avx2();
bool has_f16c();

template <class V> RLX_VEC_INLINE V splat(float v) { return V{} + v; }
template <class V> RLX_VEC_INLINE V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V> RLX_VEC_INLINE void store(float* p, const V& v) { std::memcpy(p, &v, sizeof v); }
template <class V, class W> RLX_VEC_INLINE V bits_as(const W& w) {
  static_assert(sizeof(V) == sizeof(W));
  V v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}
// Lane-wise c ? a : b (c a comparison result: all ones or zero per lane).
template <class V, class M> RLX_VEC_INLINE V select(const M& c, const V& a, const V& b) {
  return c ? a : b;  // a lane-wise blend
}
template <class V> RLX_VEC_INLINE V abs(const V& x) {
  using U = typename Lanes<V>::U;
  return bits_as<V>(bits_as<U>(x) & 0x7fffffffu);
}
// |m| with the sign bit of s.
template <class V> RLX_VEC_INLINE V copysign(const V& m, const V& s) {
  using U = typename Lanes<V>::U;
  return bits_as<V>((bits_as<U>(m) & 0x7fffffffu) | (bits_as<U>(s) & 0x80000000u));
}
// Round to nearest, ties to even, as MathFn::RoundEven: |x| below 2^23 rounded by adding and
// subtracting 2^23 (in the default rounding mode), the sign of x kept (-0.3 -> -0); larger
// values, infinities and NaN are x.
template <class V> RLX_VEC_INLINE V round_even(const V& x) {
  const V big = splat<V>(8388608.0f), a = abs(x);
  return select<V>(a < big, copysign((a + big) - big, x), x);
}
// Floor and ceil from the nearest integer, stepped by one where it lies on the wrong side; a
// zero result takes the sign of x (ceil(-0.7) = -0), as every result does (NaN stays NaN).
template <class V> RLX_VEC_INLINE V floor(const V& x) {
  const V r = round_even(x);
  return copysign(select<V>(r > x, r - splat<V>(1.0f), r), x);
}
template <class V> RLX_VEC_INLINE V ceil(const V& x) {
  const V r = round_even(x);
  return copysign(select<V>(r < x, r + splat<V>(1.0f), r), x);
}
// Lane-wise max that propagates NaN from x (the running max of the softmax).
template <class V> RLX_VEC_INLINE V max_nan(const V& m, const V& x) { return select<V>((x > m) | (x != x), x, m); }

// Half vectors (Lanes<V>::H, n/2 floats) and their double counterparts (Lanes<V>::D).
template <class V> RLX_VEC_INLINE typename Lanes<V>::D load_wide(const float* p) {
  typename Lanes<V>::H h;
  std::memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, typename Lanes<V>::D);
}
// Rounds each double lane to float (nearest even) and stores n/2 floats.
template <class V> RLX_VEC_INLINE void store_narrow(float* p, const typename Lanes<V>::D& d) {
  const typename Lanes<V>::H h = __builtin_convertvector(d, typename Lanes<V>::H);
  std::memcpy(p, &h, sizeof h);
}
template <class V> RLX_VEC_INLINE typename Lanes<V>::D load_wide(const double* p) {
  typename Lanes<V>::D d;
  std::memcpy(&d, p, sizeof d);
  return d;
}
template <class V> RLX_VEC_INLINE void store_wide(double* p, const typename Lanes<V>::D& d) { std::memcpy(p, &d, sizeof d); }
template <class D> RLX_VEC_INLINE double hsum(const D& d) {
  double s = 0;
  for (int i = 0; i < static_cast<int>(sizeof(D) / sizeof(double)); ++i) s += d[i];
  return s;
}

namespace detail {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;         // 355/512: n * kLn2Hi is exact for |n| < 2^15
inline constexpr float kLn2Lo = -2.12194440054690583e-4f;  // ln2 - kLn2Hi
inline constexpr float kRound = 12582912.0f;          // 1.5 * 2^23: adding it rounds to an integer

// e^r - 1 for |r| <= ln2/2 + a little: r + r^2 (1/2 + r/6 + ... + r^6/8!).
template <class V> RLX_VEC_INLINE V expm1_reduced(const V& r) {
  V q = splat<V>(1.0f / 40320.0f);
  q = q * r + (1.0f / 5040.0f);
  q = q * r + (1.0f / 720.0f);
  q = q * r + (1.0f / 120.0f);
  q = q * r + (1.0f / 24.0f);
  q = q * r + (1.0f / 6.0f);
  q = q * r + 0.5f;
  return r + (r * r) * q;
}

// x = n ln2 + r for x in [-150 ln2, 150 ln2]: returns r, sets n (as an integer vector).
template <class V> RLX_VEC_INLINE V reduce(const V& x, typename Lanes<V>::I& n) {
  using U = typename Lanes<V>::U;
  using I = typename Lanes<V>::I;
  const V t = x * kLog2e + kRound;  // round(x / ln2) sits in the low mantissa bits of t
  const V nf = t - kRound;
  n = bits_as<I>(bits_as<U>(t) - bits_as<U>(splat<V>(kRound)));
  return (x - nf * kLn2Hi) - nf * kLn2Lo;
}

// 2^n as a float for -126 <= n <= 127.
template <class V> RLX_VEC_INLINE V pow2(const typename Lanes<V>::I& n) {
  using U = typename Lanes<V>::U;
  return bits_as<V>(bits_as<U>(n + 127) << 23);
}

}  // namespace detail

template <class V> RLX_VEC_INLINE V exp(const V& x) {
  using I = typename Lanes<V>::I;
  // Below -103.98 the result rounds to 0, above 88.73 it overflows: clamping keeps n in range and
  // leaves those results (and the infinities) to the scaling. NaN compares false and stays.
  V xc = select<V>(x < -104.0f, splat<V>(-104.0f), x);
  xc = select<V>(xc > 89.0f, splat<V>(89.0f), xc);
  I n;
  const V r = detail::reduce(xc, n);
  const V e = detail::expm1_reduced(r) + 1.0f;
  const I n1 = n >> 1;  // 2^n = 2^n1 * 2^(n - n1), both factors normal for -150 <= n <= 128
  const V y = (e * detail::pow2<V>(n1)) * detail::pow2<V>(n - n1);
  return select<V>(x != x, x, y);
}

// e^x - 1 for |x| <= 20 (tanh's range; larger values are not reduced exactly).
template <class V> RLX_VEC_INLINE V expm1_small(const V& x) {
  using I = typename Lanes<V>::I;
  I n;
  const V r = detail::reduce(x, n);
  const V p = detail::expm1_reduced(r);
  const V s = detail::pow2<V>(n);
  return p * s + (s - 1.0f);  // 2^n (e^r - 1) + (2^n - 1); exact for n == 0
}

template <class V> RLX_VEC_INLINE V tanh(const V& x) {
  // tanh |x| = -e / (e + 2) with e = expm1(-2 |x|) in (-1, 0]: with a negative argument the
  // reconstruction 2^n (e^r - 1) + (2^n - 1) cancels less than with a positive one. 1 in float
  // from |x| > 9.01.
  V a = abs(x);
  a = select<V>(a > 9.1f, splat<V>(9.1f), a);
  const V e = expm1_small(-(a + a));
  const V t = -e / (e + 2.0f);
  return select<V>(x != x, x, copysign(t, x));
}

template <class V> RLX_VEC_INLINE V sigmoid(const V& x) { return 1.0f / (1.0f + exp(-x)); }

namespace detail {
// erf(x) / x = 2/sqrt(pi) sum_n (-x^2)^n / (n! (2n + 1)), n = 0..11 (truncation < 1e-10 for |x| <= 1).
inline constexpr float kErfTaylor[12] = {1.128379167e+00f, -3.761263890e-01f, 1.128379167e-01f, -2.686617065e-02f,
                                         5.223977625e-03f, -8.548327023e-04f, 1.205533298e-04f, -1.492565036e-05f,
                                         1.646211437e-06f, -1.636584469e-07f, 1.480719282e-08f, -1.229055530e-09f};
// erfc(x) for 1 <= x <= 4 as a Chebyshev series in u = (2x - 5) / 3: coefficients of its
// interpolant at 40 Chebyshev nodes (computed in 40-digit arithmetic); the dropped tail is below
// 1e-8 in absolute terms, a sixth of an ulp of erf there.
inline constexpr float kErfcCheb[16] = {3.030252054e-02f,  -5.425132390e-02f, 3.876375644e-02f,  -2.179748780e-02f,
                                        9.314174793e-03f,  -2.748111833e-03f, 3.576751739e-04f,  1.268622107e-04f,
                                        -8.896524125e-05f, 2.228847529e-05f,  -7.040156716e-08f, -1.808171485e-06f,
                                        5.517666254e-07f,  -2.368918483e-08f, -3.172083481e-08f, 9.389144817e-09f};
}  // namespace detail

// erf: |x| <= 1 by its Taylor series, 1 < |x| < 4 as 1 - erfc(x) with erfc from its Chebyshev
// series (Clenshaw), +-1 from |x| >= 4 (erf rounds to 1 in float from 3.92).
template <class V> RLX_VEC_INLINE V erf(const V& x) {
  const V a = abs(x);
  const V z = a * a;
  V p = splat<V>(detail::kErfTaylor[11]);
  for (int n = 10; n >= 0; --n) p = p * z + detail::kErfTaylor[n];
  const V small = a * p;
  V ac = select<V>(a < 1.0f, splat<V>(1.0f), a);
  ac = select<V>(ac > 4.0f, splat<V>(4.0f), ac);
  const V u = (ac + ac - 5.0f) * (1.0f / 3.0f);
  const V u2 = u + u;
  V b1 = V{}, b2 = V{};
  for (int k = 15; k >= 1; --k) {
    const V t = (u2 * b1 - b2) + detail::kErfcCheb[k];
    b2 = b1;
    b1 = t;
  }
  const V large = 1.0f - ((u * b1 - b2) + detail::kErfcCheb[0]);
  V r = select<V>(a <= 1.0f, small, large);
  r = select<V>(a >= 4.0f, splat<V>(1.0f), r);
  return select<V>(x != x, x, copysign(r, x));
}

}  // namespace rlx::cpu::vec

#pragma GCC diagnostic pop
