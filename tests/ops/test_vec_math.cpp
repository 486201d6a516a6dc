// The CPU's vector f32 math (backends/cpu/vec_math.h, vec_rows.h) against libm and double
// references: exp within 2 ulp, tanh and erf within 3 ulp over the whole float range (a strided sweep
// of every bit pattern plus infinities, NaN, denormal inputs and results, the overflow and
// underflow edges); the 4- and 8-lane paths give the same bits; softmax / log-softmax and norm
// rows (every tail length) against double references; the vectorized activations against their
// scalar formula.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/vec_formula.h"
#include "backends/cpu/vec_rows.h"

namespace rlx::cpu {
namespace {

// Position of a float on the ordered line of all floats (-0 and +0 both 0).
int64_t ordered(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
}
// Distance in ulps; NaN against NaN is 0, NaN against a number is "infinite".
int64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  return std::llabs(ordered(a) - ordered(b));
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Every 1021st bit pattern (about 4.2 million floats, both signs, NaNs included) plus the edges.
std::vector<float> sweep() {
  std::vector<float> v;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 1021) v.push_back(from_bits(static_cast<uint32_t>(u)));
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 88.72283f, 88.72284f,
                  88.7228394f, 89.0f, -87.33654f, -87.33655f, -103.2789f, -103.9720f, -103.9721f, -104.0f, -150.0f,
                  1e-30f, -1e-30f, 0.34657359f, -0.34657359f, 9.0f, 9.1f, -9.1f, 20.0f})
    v.push_back(f);
  for (float f = -104.5f; f < 89.5f; f += 0.0009765625f) v.push_back(f);  // dense over the finite range
  return v;
}

struct Worst {
  int64_t ulp = 0;
  float at = 0;
};

template <class Ref>
Worst check(const std::vector<float>& x, const std::vector<float>& y, Ref ref) {
  Worst w;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t u = ulps(y[i], ref(x[i]));
    if (u > w.ulp) w = {u, x[i]};
  }
  return w;
}

TEST(VecMath, ExpWithinTwoUlpOverTheFloatRange) {
  const std::vector<float> x = sweep();
  std::vector<float> y(x.size()), narrow(x.size());
  exp_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  exp_f32(x.data(), narrow.data(), static_cast<int64_t>(x.size()), true);
  EXPECT_EQ(std::memcmp(y.data(), narrow.data(), y.size() * sizeof(float)), 0) << "the 4- and 8-lane paths differ";
  const Worst w = check(x, y, [](float v) { return std::exp(v); });
  EXPECT_LE(w.ulp, 2) << "worst at x = " << w.at;
  const float inf = std::numeric_limits<float>::infinity();
  float s[6] = {inf, -inf, 0.0f, -0.0f, 89.0f, -110.0f}, r[6];
  exp_f32(s, r, 6);
  EXPECT_EQ(r[0], inf);
  EXPECT_EQ(r[1], 0.0f);
  EXPECT_EQ(r[2], 1.0f);
  EXPECT_EQ(r[3], 1.0f);
  EXPECT_EQ(r[4], inf);
  EXPECT_EQ(r[5], 0.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  exp_f32(&nan, r, 1);
  EXPECT_TRUE(std::isnan(r[0]));
  // Denormal results: exp(-100) = 3.72e-44 and exp(-95) are denormals, within 2 ulp of libm's.
  for (float v : {-88.0f, -95.0f, -100.0f, -103.0f}) {
    exp_f32(&v, r, 1);
    EXPECT_LE(ulps(r[0], std::exp(v)), 2) << v;
    EXPECT_GT(r[0], 0.0f) << v;
  }
}

TEST(VecMath, TanhWithinThreeUlpOverTheFloatRange) {
  const std::vector<float> x = sweep();
  std::vector<float> y(x.size()), narrow(x.size());
  tanh_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  tanh_f32(x.data(), narrow.data(), static_cast<int64_t>(x.size()), true);
  EXPECT_EQ(std::memcmp(y.data(), narrow.data(), y.size() * sizeof(float)), 0) << "the 4- and 8-lane paths differ";
  const Worst w = check(x, y, [](float v) { return std::tanh(v); });
  EXPECT_LE(w.ulp, 3) << "worst at x = " << w.at;
  float s[4] = {-0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(), -30.0f}, r[4];
  tanh_f32(s, r, 4);
  EXPECT_TRUE(r[0] == 0.0f && std::signbit(r[0]));
  EXPECT_EQ(r[1], std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(r[2], 1.0f);
  EXPECT_EQ(r[3], -1.0f);
}

TEST(VecMath, ErfWithinThreeUlpOverTheFloatRange) {
  const std::vector<float> x = sweep();
  std::vector<float> y(x.size()), narrow(x.size());
  erf_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  erf_f32(x.data(), narrow.data(), static_cast<int64_t>(x.size()), true);
  EXPECT_EQ(std::memcmp(y.data(), narrow.data(), y.size() * sizeof(float)), 0) << "the 4- and 8-lane paths differ";
  const Worst w = check(x, y, [](float v) { return std::erf(v); });
  EXPECT_LE(w.ulp, 3) << "worst at x = " << w.at;
  const float inf = std::numeric_limits<float>::infinity();
  float s[5] = {-0.0f, inf, -inf, 1.0f, 4.0f}, r[5];
  erf_f32(s, r, 5);
  EXPECT_TRUE(r[0] == 0.0f && std::signbit(r[0]));
  EXPECT_EQ(r[1], 1.0f);
  EXPECT_EQ(r[2], -1.0f);
  EXPECT_LE(ulps(r[3], std::erf(1.0f)), 3);
  EXPECT_EQ(r[4], 1.0f);
}

// The vectorized activations agree with their scalar formula (libm's exp / tanh) within a few
// ulp of the result, or of the formula's own cancellation where it subtracts nearly equal terms.
TEST(VecMath, VectorizedActivationsFollowTheirFormula) {
  std::vector<float> x;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-30, 30);
  for (int i = 0; i < 20000; ++i) x.push_back(d(rng));
  for (int i = -400; i <= 400; ++i) x.push_back(static_cast<float>(i) * 0.01f);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  std::vector<float> y(x.size());
  int covered = 0;
#define RLX_CHECK_KIND(K)                                                                                          \
  if constexpr (vectorized_activation<ActKind::K>()) {                                                            \
    ++covered;                                                                                                    \
    ASSERT_TRUE(activation_f32(ActKind::K, x.data(), y.data(), static_cast<int64_t>(x.size()))) << #K;            \
    for (size_t i = 0; i < x.size(); ++i) {                                                                       \
      const float want = codegen::ActFormula<ActKind::K>::eval(x[i]);                                             \
      const double slack = 8 * std::numeric_limits<float>::epsilon() * (1 + std::fabs(x[i]));                     \
      if (!(ulps(y[i], want) <= 4 || std::fabs(y[i] - want) <= slack))                                            \
        ADD_FAILURE() << #K << "(" << x[i] << ") = " << y[i] << ", the scalar formula gives " << want;            \
    }                                                                                                             \
  } else {                                                                                                        \
    EXPECT_FALSE(activation_f32(ActKind::K, x.data(), y.data(), static_cast<int64_t>(x.size()))) << #K;           \
  }
  RLX_FLOAT_ACTIVATIONS(RLX_CHECK_KIND)
#undef RLX_CHECK_KIND
  EXPECT_GE(covered, 10);
}

// Round (ties to even), Floor and Ceil on vector lanes give exactly the scalar formula's value:
// ties, signed zeros, values that round to zero, the 2^23 boundary, infinities and NaN.
TEST(VecMath, RoundingActivationsAreExact) {
  std::vector<float> x = {0.5f,  -0.5f,  1.5f,       -1.5f,      2.5f,        -2.5f,       0.3f,      -0.3f,
                          0.0f,  -0.0f,  0.49999997f, 8388607.5f, -8388607.5f, 8388608.0f, 16777215.f, 1e30f,
                          -1e30f, 1e-40f, -1e-40f,    INFINITY,   -INFINITY,   NAN,         254.5f,    -127.5f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1000, 1000);
  for (int i = 0; i < 5000; ++i) x.push_back(d(rng));
  for (int i = -80; i <= 80; ++i) x.push_back(static_cast<float>(i) * 0.25f);
  std::vector<float> y(x.size());
  for (ActKind k : {ActKind::Round, ActKind::Floor, ActKind::Ceil}) {
    ASSERT_TRUE(activation_f32(k, x.data(), y.data(), static_cast<int64_t>(x.size()))) << enum_name(k);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = k == ActKind::Round ? std::nearbyint(x[i]) : k == ActKind::Floor ? std::floor(x[i]) : std::ceil(x[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[i])) << enum_name(k) << "(" << x[i] << ")";
        continue;
      }
      EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want))
          << enum_name(k) << "(" << x[i] << ") = " << y[i] << ", want " << want;
    }
  }
}

std::vector<float> random_row(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = d(rng);
  return v;
}

TEST(VecMath, SoftmaxRowsMatchADoubleReference) {
  for (int64_t n = 1; n <= 70; n += (n < 20 ? 1 : 7)) {
    for (bool log : {false, true}) {
      std::vector<float> x = random_row(n, static_cast<uint32_t>(n), 20.0f);
      if (n > 3) x[1] = -std::numeric_limits<float>::infinity();
      std::vector<float> y(x.size());
      softmax_row_f32(x.data(), y.data(), n, log);
      double mx = -INFINITY, sum = 0;
      for (float v : x) mx = std::max(mx, static_cast<double>(v));
      for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
      for (int64_t i = 0; i < n; ++i) {
        const double want = log ? (x[i] - mx) - std::log(sum) : std::exp(x[i] - mx) / sum;
        // x - max is rounded to f32 first (as in the scalar kernels): up to |x - max| * 2^-24 more.
        if (std::isinf(x[i])) {
          EXPECT_EQ(y[i], log ? -std::numeric_limits<float>::infinity() : 0.0f);
          continue;
        }
        const double d = std::fabs(x[i] - mx);
        const double tol = log ? 4e-7 * std::fabs(want) + 1e-6 : (4e-7 + 6e-8 * d) * want;
        EXPECT_NEAR(y[i], want, tol) << "n " << n << " log " << log << " i " << i;
      }
    }
  }
  // A NaN makes the row NaN; so does a row of -inf (as the scalar kernels).
  for (int64_t n : {5, 19}) {
    std::vector<float> x = random_row(n, 7, 1.0f), y(static_cast<size_t>(n));
    x[static_cast<size_t>(n - 2)] = std::numeric_limits<float>::quiet_NaN();
    softmax_row_f32(x.data(), y.data(), n, false);
    for (float v : y) EXPECT_TRUE(std::isnan(v));
    std::fill(x.begin(), x.end(), -std::numeric_limits<float>::infinity());
    softmax_row_f32(x.data(), y.data(), n, true);
    for (float v : y) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(VecMath, SoftmaxColumnsMatchADoubleReference) {
  for (int64_t n : {1, 3, 8, 13, 37}) {
    for (bool log : {false, true}) {
      const int64_t mid = 6, stride = n + 5;  // columns of a wider row-major block
      std::vector<float> x = random_row(mid * stride, static_cast<uint32_t>(n), 20.0f), y(x.size(), -7.0f);
      x[static_cast<size_t>(2 * stride)] = -std::numeric_limits<float>::infinity();
      softmax_cols_f32(x.data(), y.data(), mid, stride, n, log);
      for (int64_t j = 0; j < n; ++j) {
        double mx = -INFINITY, sum = 0;
        for (int64_t m = 0; m < mid; ++m) mx = std::max(mx, static_cast<double>(x[m * stride + j]));
        for (int64_t m = 0; m < mid; ++m) sum += std::exp(x[m * stride + j] - mx);
        for (int64_t m = 0; m < mid; ++m) {
          const float xv = x[m * stride + j], yv = y[m * stride + j];
          if (std::isinf(xv)) {
            EXPECT_EQ(yv, log ? -std::numeric_limits<float>::infinity() : 0.0f);
            continue;
          }
          const double want = log ? (xv - mx) - std::log(sum) : std::exp(xv - mx) / sum;
          const double tol = log ? 4e-7 * std::fabs(want) + 1e-6 : (4e-7 + 6e-8 * std::fabs(xv - mx)) * want;
          EXPECT_NEAR(yv, want, tol) << "n " << n << " log " << log << " column " << j << " row " << m;
        }
      }
      for (int64_t m = 0; m < mid; ++m)  // columns past n are not touched
        for (int64_t j = n; j < stride; ++j) EXPECT_EQ(y[m * stride + j], -7.0f);
    }
  }
}

// The bulk f16 conversions (F16C where the CPU has it) give the scalar conversions' bits for every
// f16 and for a sweep of every float bit pattern (rounding ties, denormals, overflow); a NaN stays
// a (quiet) NaN.
TEST(VecMath, F16ConversionsMatchTheScalarOnes) {
  std::vector<f16> h(65536);
  for (uint32_t u = 0; u < 65536; ++u) h[u].bits = static_cast<uint16_t>(u);
  std::vector<float> wide(h.size()), want(h.size());
  f16_to_f32(h.data(), wide.data(), static_cast<int64_t>(h.size()));
  f16_to_f32(h.data(), want.data(), static_cast<int64_t>(h.size()), true);
  for (uint32_t u = 0; u < 65536; ++u) {  // F16C quiets signaling NaNs; every other value is exact
    if (std::isnan(want[u])) EXPECT_TRUE(std::isnan(wide[u])) << u;
    else EXPECT_EQ(std::bit_cast<uint32_t>(wide[u]), std::bit_cast<uint32_t>(want[u])) << u;
  }
  std::vector<float> x;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) x.push_back(from_bits(static_cast<uint32_t>(u)));
  for (uint32_t u = 0; u < 65536; ++u) {  // every f16 value, and the midpoints to its neighbour
    const uint32_t b = std::bit_cast<uint32_t>(want[u]);
    x.push_back(want[u]);
    x.push_back(from_bits(b + 0x1000u));
    x.push_back(from_bits(b + 0xfffu));
  }
  std::vector<f16> narrow(x.size()), ref(x.size());
  f32_to_f16(x.data(), narrow.data(), static_cast<int64_t>(x.size()));
  f32_to_f16(x.data(), ref.data(), static_cast<int64_t>(x.size()), true);
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (narrow[i].bits != ref[i].bits && !(std::isnan(x[i]) && (narrow[i].bits & 0x7e00u) == 0x7e00u) && bad++ < 5)
      ADD_FAILURE() << "f32 " << x[i] << " (bits " << std::bit_cast<uint32_t>(x[i]) << ") -> f16 " << narrow[i].bits
                    << ", the scalar conversion gives " << ref[i].bits;
  EXPECT_EQ(bad, 0);
}

TEST(VecMath, NormRowsMatchTheDoubleFormula) {
  for (int64_t len : {1, 3, 4, 7, 8, 9, 16, 31, 768}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool rms = variant & 1, with_res = variant & 2;
      const std::vector<float> x = random_row(len, 11, 3.0f), r = random_row(len, 12, 1.0f);
      std::vector<double> gamma(static_cast<size_t>(len)), beta(static_cast<size_t>(len));
      for (int64_t j = 0; j < len; ++j) gamma[j] = 0.5 + 0.01 * j, beta[j] = -0.25 + 0.002 * j;
      std::vector<float> y(static_cast<size_t>(len));
      norm_row_f32(x.data(), with_res ? r.data() : nullptr, gamma.data(), rms ? nullptr : beta.data(), y.data(), len,
                   1e-5, rms);
      std::vector<double> v(static_cast<size_t>(len));
      double mean = 0, sq = 0;
      for (int64_t j = 0; j < len; ++j) v[j] = with_res ? static_cast<float>(x[j] + r[j]) : x[j];
      if (!rms) {
        for (double e : v) mean += e;
        mean /= static_cast<double>(len);
      }
      for (double e : v) sq += (e - mean) * (e - mean);
      const double inv = 1 / std::sqrt(sq / static_cast<double>(len) + 1e-5);
      for (int64_t j = 0; j < len; ++j) {
        const float want = static_cast<float>((v[j] - mean) * inv * gamma[j] + (rms ? 0.0 : beta[j]));
        EXPECT_LE(ulps(y[j], want), 1) << "len " << len << " variant " << variant << " j " << j;
      }
    }
  }
}

}  // namespace
}  // namespace rlx::cpu
