// Cast: the full matrix of the 13 compute dtypes against a reference written here (exact long double
// arithmetic, its own round-to-nearest-even for f16/bf16/f32), with edge values: ties,
// double-rounding traps (f64 / large integers -> f16/bf16), overflow to inf, subnormals,
// NaN/inf -> int, negative float -> unsigned (saturates to 0), modular int -> int.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/elementwise_test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using elemtest::run_op;
using testing::error_message;
using testing::from_doubles;

using LD = long double;

struct Fmt {
  int frac, emin;
  LD maxv;
};

Fmt fmt_of(DType t) {
  switch (t) {
    case DType::F16: return {10, -14, 65504.0L};
    case DType::BF16: return {7, -126, std::ldexp(2.0L - std::ldexp(1.0L, -7), 127)};
    case DType::F32: return {23, -126, static_cast<LD>(FLT_MAX)};
    default: return {52, -1022, static_cast<LD>(DBL_MAX)};
  }
}

// Exact value `x` rounded to the binary format (ties to even; beyond max -> inf).
LD round_fmt(LD x, const Fmt& f) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const LD a = std::fabs(x);
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int lead = std::max(e - 1, f.emin);
  const LD ulp = std::ldexp(1.0L, lead - f.frac);
  const LD q = a / ulp;
  LD n = std::floor(q);
  const LD d = q - n;
  if (d > 0.5L || (d == 0.5L && std::fmod(n, 2.0L) != 0)) n += 1;
  LD r = n * ulp;
  if (r > f.maxv) r = INFINITY;
  return std::copysign(r, x);
}

int64_t int_min(DType t) {
  switch (t) {
    case DType::I8: return INT8_MIN;
    case DType::I16: return INT16_MIN;
    case DType::I32: return INT32_MIN;
    case DType::I64: return INT64_MIN;
    default: return 0;
  }
}
LD int_max(DType t) {
  switch (t) {
    case DType::I8: return INT8_MAX;
    case DType::I16: return INT16_MAX;
    case DType::I32: return INT32_MAX;
    case DType::I64: return static_cast<LD>(INT64_MAX);
    case DType::U8: return UINT8_MAX;
    case DType::U16: return UINT16_MAX;
    case DType::U64: return static_cast<LD>(UINT64_MAX);
    default: return UINT32_MAX;
  }
}

// The two's complement bits of an integer value (signed or up to 2^64 - 1).
uint64_t int_bits(LD v) { return v < 0 ? static_cast<uint64_t>(static_cast<int64_t>(v)) : static_cast<uint64_t>(v); }

int64_t wrap_int(DType t, int64_t v) {
  switch (t) {
    case DType::I8: return static_cast<int8_t>(v);
    case DType::I16: return static_cast<int16_t>(v);
    case DType::I32: return static_cast<int32_t>(v);
    case DType::U8: return static_cast<uint8_t>(v);
    case DType::U32: return static_cast<uint32_t>(v);
    case DType::U16: return static_cast<uint16_t>(v);
    default: return v;
  }
}

// Source test values per dtype (exact in that dtype for ints; floats get rounded on creation).
std::vector<LD> source_values(DType t) {
  const LD p = 2.0L;
  switch (t) {
    case DType::Bool: return {0, 1};
    case DType::I8: return {0, 1, -1, 5, 127, -128};
    case DType::U8: return {0, 1, 127, 128, 255};
    case DType::I16: return {0, 1, -1, 127, 128, 255, 256, -129, 2049, 2051, 32767, -32768};
    case DType::U16: return {0, 1, 127, 128, 255, 256, 2049, 2051, 32768, 65504, 65519, 65520, 65535};
    case DType::U64:
      return {0, 1, 255, 256, 2049, 65520, std::pow(p, 24) + std::pow(p, 16) + 1, std::pow(p, 53) + 1,
              std::pow(p, 63), std::pow(p, 63) + std::pow(p, 40) + 1, std::pow(p, 64) - 1};
    case DType::U32:
      return {0, 1, 255, 256, 2049, 65520, std::pow(p, 24) + std::pow(p, 16) + 1, std::pow(p, 31), 4294967295.0L};
    case DType::I32:
      return {0,     1,     -1,    127,   128,   255, 256, -128, -129, 2049, 2051, 65519, 65520,
              std::pow(p, 24) + 1, std::pow(p, 24) + std::pow(p, 16) + 1, -(std::pow(p, 24) + std::pow(p, 16) + 1),
              2147483647.0L, -2147483648.0L};
    case DType::I64:
      return {0, 1, -1, 127, 128, 255, 256, -129, 2049, 2051, 65519, 65520,
              std::pow(p, 24) + std::pow(p, 16) + 1, std::pow(p, 31), -std::pow(p, 31) - 1, std::pow(p, 32) + 5,
              std::pow(p, 53) + 1, std::pow(p, 62) + std::pow(p, 54) + 1, -(std::pow(p, 62) + std::pow(p, 54) + 1),
              static_cast<LD>(INT64_MAX), static_cast<LD>(INT64_MIN)};
    default:  // floats
      return {0, -0.0L, 1, -1, 2.5L, -2.5L, 3.7L, -3.7L, -0.7L, 127.9L, 128.5L, 255.5L, 256, -128.5L, -129, 300.7L,
              -1.5L, 65504, 65519.99L, 65520, 1 + std::pow(p, -11), 1 + 3 * std::pow(p, -11),
              1 + std::pow(p, -11) + std::pow(p, -40), 1 + std::pow(p, -8) + std::pow(p, -40),
              std::pow(p, -24), std::pow(p, -25), 1.5L * std::pow(p, -25), 1e-40L, 3e9L, 5e9L, -3e9L, 1e19L, -1e19L,
              3.4028235e38L, 3.40282360e38L, 1e300L, NAN, INFINITY, -INFINITY};
  }
}

Tensor make_source(DType t, const std::vector<LD>& v) {
  const auto n = static_cast<int64_t>(v.size());
  if (t == DType::U64) {
    std::vector<uint64_t> x;
    for (LD d : v) x.push_back(static_cast<uint64_t>(d));
    return Tensor::of<uint64_t>({n}, x);
  }
  if (t == DType::I64) {
    std::vector<int64_t> x;
    for (LD d : v) x.push_back(static_cast<int64_t>(d));
    return Tensor::i64({n}, x);
  }
  if (t == DType::F64) {
    std::vector<double> x;
    for (LD d : v) x.push_back(static_cast<double>(d));
    return Tensor::f64({n}, x);
  }
  if (t == DType::F32) {
    std::vector<float> x;
    for (LD d : v) x.push_back(static_cast<float>(d));
    return Tensor::f32({n}, x);
  }
  std::vector<double> x;
  for (LD d : v) x.push_back(static_cast<double>(d));
  return from_doubles(t, {n}, x);  // ints are exact; f16/bf16 get rounded (the reference reads them back)
}

// The exact source values as stored.
std::vector<LD> read_source(const Tensor& t) {
  std::vector<LD> out;
  if (t.dtype() == DType::U64) {
    for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<LD>(t.data<uint64_t>()[i]));
  } else if (is_float(t.dtype())) {
    for (double d : t.to_f64()) out.push_back(d);
  } else {
    for (int64_t i : t.to_i64()) out.push_back(static_cast<LD>(i));
  }
  return out;
}

LD ref_cast(DType from, DType to, LD v) {
  if (to == DType::Bool) return v != 0 ? 1 : 0;  // NaN != 0
  if (is_float(to)) return round_fmt(v, fmt_of(to));
  if (is_float(from)) {  // truncate + saturate, NaN -> 0
    if (std::isnan(v)) return 0;
    const LD t = std::trunc(v);
    if (t <= static_cast<LD>(int_min(to))) return static_cast<LD>(int_min(to));
    if (t >= int_max(to)) return int_max(to);
    return t;
  }
  if (to == DType::U64) return static_cast<LD>(int_bits(v));
  return static_cast<LD>(wrap_int(to, static_cast<int64_t>(int_bits(v))));
}

TEST(ElementwiseCast, FullMatrix) {
  for (DType from : elemtest::kAllTypes) {
    const Tensor src = make_source(from, source_values(from));
    const std::vector<LD> sv = read_source(src);
    for (DType to : elemtest::kAllTypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      const Tensor out = run_op(ops::Cast{to}, {src});
      ASSERT_EQ(out.dtype(), to);
      ASSERT_EQ(out.shape(), src.shape());
      if (is_float(to)) {
        const auto got = out.to_f64();
        for (size_t i = 0; i < sv.size(); ++i) {
          const double want = static_cast<double>(ref_cast(from, to, sv[i]));
          const bool same = (std::isnan(want) && std::isnan(got[i])) ||
                            (want == got[i] && std::signbit(want) == std::signbit(got[i]));
          EXPECT_TRUE(same) << "element " << i << " source " << static_cast<double>(sv[i]) << ": got " << got[i]
                            << " want " << want;
        }
      } else {
        const auto got = out.to_i64();  // u64: the same bits
        for (size_t i = 0; i < sv.size(); ++i) {
          const auto want = static_cast<int64_t>(int_bits(ref_cast(from, to, sv[i])));
          EXPECT_EQ(got[i], want) << "element " << i << " source " << static_cast<double>(sv[i]);
        }
      }
    }
  }
}

TEST(ElementwiseCast, NamedEdgeCases) {
  auto cast1 = [](DType from, DType to, double v) {
    return run_op(ops::Cast{to}, {from_doubles(from, {1}, {v})}).to_f64()[0];
  };
  // Double-rounding traps: f64 -> f16 / bf16 must round once from the exact value.
  EXPECT_EQ(cast1(DType::F64, DType::F16, 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 1 + std::ldexp(1.0, -10));
  EXPECT_EQ(cast1(DType::F64, DType::BF16, 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 1 + std::ldexp(1.0, -7));
  EXPECT_EQ(cast1(DType::I32, DType::BF16, 16777216.0 + 65536 + 1), 16777216.0 + 131072);
  // Ties to even.
  EXPECT_EQ(cast1(DType::F32, DType::F16, 1 + std::ldexp(1.0, -11)), 1.0);
  EXPECT_EQ(cast1(DType::F32, DType::F16, 1 + 3 * std::ldexp(1.0, -11)), 1 + std::ldexp(1.0, -9));
  EXPECT_EQ(cast1(DType::I32, DType::F16, 2049), 2048);
  EXPECT_EQ(cast1(DType::I32, DType::F16, 2051), 2052);
  // Overflow and subnormals.
  EXPECT_EQ(cast1(DType::F32, DType::F16, 65519), 65504);
  EXPECT_TRUE(std::isinf(cast1(DType::F32, DType::F16, 65520)));
  EXPECT_EQ(cast1(DType::F32, DType::F16, std::ldexp(1.0, -24)), std::ldexp(1.0, -24));
  EXPECT_EQ(cast1(DType::F32, DType::F16, std::ldexp(1.0, -25)), 0);
  EXPECT_EQ(cast1(DType::F32, DType::F16, 1.5 * std::ldexp(1.0, -25)), std::ldexp(1.0, -24));
  // Float -> int: truncation toward zero, saturation, NaN -> 0, negative -> unsigned = 0.
  EXPECT_EQ(cast1(DType::F32, DType::I32, -3.7), -3);
  EXPECT_EQ(cast1(DType::F32, DType::I8, 300.7), 127);
  EXPECT_EQ(cast1(DType::F32, DType::I8, -129.9), -128);
  EXPECT_EQ(cast1(DType::F32, DType::U8, -1.5), 0);
  EXPECT_EQ(cast1(DType::F64, DType::U32, -0.7), 0);
  EXPECT_EQ(cast1(DType::F32, DType::I32, NAN), 0);
  EXPECT_EQ(cast1(DType::F16, DType::U8, INFINITY), 255);
  EXPECT_EQ(cast1(DType::BF16, DType::I16, -INFINITY), -32768);
  // Int -> int is modular; -> bool is x != 0.
  EXPECT_EQ(cast1(DType::I32, DType::U8, -1), 255);
  EXPECT_EQ(cast1(DType::I32, DType::U32, -1), 4294967295.0);
  EXPECT_EQ(cast1(DType::U32, DType::I32, 4294967295.0), -1);
  EXPECT_EQ(cast1(DType::F32, DType::Bool, NAN), 1);
  EXPECT_EQ(cast1(DType::F32, DType::Bool, -0.0), 0);
  EXPECT_EQ(cast1(DType::F32, DType::Bool, 0.25), 1);
}

// f32 -> u8 / i8 over long rows (the AVX2 loop and its scalar tail): NaN -> 0, truncation toward
// zero, saturation at both ends, signed zeros, infinities.
TEST(ElementwiseCast, FloatToByteRowsSaturate) {
  std::vector<double> v = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 0.9, -0.9, 1.5, 127.9, 128.0, -128.9, -129.0,
                           254.99, 255.0, 255.5, 256.0, 1e9, -1e9, 3.0, -3.7};
  for (int i = 0; i < 1000; ++i) v.push_back(-300.0 + 0.613 * i);
  const int64_t n = static_cast<int64_t>(v.size());
  const Tensor src = from_doubles(DType::F32, {n}, v);
  for (DType to : {DType::U8, DType::I8}) {
    const Tensor out = run_op(ops::Cast{to}, {src});
    const std::vector<double> got = out.to_f64();
    const double lo = to == DType::U8 ? 0 : -128, hi = to == DType::U8 ? 255 : 127;
    for (int64_t i = 0; i < n; ++i) {
      const double f = static_cast<double>(static_cast<float>(v[size_t(i)]));
      const double want = std::isnan(f) ? 0.0 : std::clamp(std::trunc(f), lo, hi);
      ASSERT_EQ(got[size_t(i)], want) << dtype_name(to) << " from " << f;
    }
  }
}

TEST(ElementwiseCast, ShapesAndInference) {
  const Tensor big = testing::random_tensor(DType::F32, {5, 9000}, 3, -300, 300);
  const Tensor out = run_op(ops::Cast{DType::I16}, {big});
  const auto x = big.to_f64();
  const auto y = out.to_i64();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], static_cast<int64_t>(std::trunc(x[i]))) << i;
  EXPECT_EQ(run_op(ops::Cast{DType::F16}, {from_doubles(DType::I32, {0, 4}, {})}).shape(), (std::vector<int64_t>{0, 4}));
  const Shape s = elemtest::infer1(ops::Cast{DType::BF16}, {Shape({Dim::symbol("b"), 3}, DType::I8)});
  EXPECT_EQ(s, Shape({Dim::symbol("b"), 3}, DType::BF16));
  EXPECT_THAT(error_message([] { elemtest::infer1(ops::Cast{static_cast<DType>(42)}, {Shape::of({2})}); }),
              HasSubstr("invalid target dtype"));
}

}  // namespace
}  // namespace rlx
