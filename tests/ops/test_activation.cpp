// Activation against naive double references: every ActKind x every accepted dtype, the
// integer kinds (Neg/Abs/Relu/Sign incl. wrapping and unsigned), Not on bool and integers, half-to-even
// Round, special values, and dtype rejection.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/elementwise_test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using elemtest::run_op;
using elemtest::uniform;
using elemtest::wrap_to;
using testing::all_close;
using testing::error_message;
using testing::from_doubles;
using testing::to_doubles;

constexpr ActKind kAllAct[] = {
    ActKind::Gelu, ActKind::GeluApprox, ActKind::Silu, ActKind::Relu,    ActKind::Sigmoid,    ActKind::Tanh,
    ActKind::Exp,  ActKind::Log,        ActKind::Sqrt, ActKind::Rsqrt,   ActKind::Neg,        ActKind::Abs,
    ActKind::Sin,  ActKind::Cos,        ActKind::Tan,  ActKind::Atan,    ActKind::Round,      ActKind::Erf,
    ActKind::Floor, ActKind::Ceil,      ActKind::Reciprocal, ActKind::Sign, ActKind::Softplus, ActKind::Asin,
    ActKind::Acos, ActKind::Not};

bool int_kind(ActKind k) { return k == ActKind::Neg || k == ActKind::Abs || k == ActKind::Relu || k == ActKind::Sign; }

double ref_round_half_even(double x) {
  const double f = std::floor(x), d = x - f;
  if (d < 0.5) return f;
  if (d > 0.5) return f + 1;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

double ref_act(ActKind k, double x) {
  const double pi = 3.14159265358979323846;
  switch (k) {
    case ActKind::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case ActKind::GeluApprox: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
    case ActKind::Silu: return x / (1 + std::exp(-x));
    case ActKind::Relu: return x > 0 ? x : 0;
    case ActKind::Sigmoid: return 1 / (1 + std::exp(-x));
    case ActKind::Tanh: return std::tanh(x);
    case ActKind::Exp: return std::exp(x);
    case ActKind::Log: return std::log(x);
    case ActKind::Sqrt: return std::sqrt(x);
    case ActKind::Rsqrt: return 1 / std::sqrt(x);
    case ActKind::Neg: return -x;
    case ActKind::Abs: return std::fabs(x);
    case ActKind::Sin: return std::sin(x);
    case ActKind::Cos: return std::cos(x);
    case ActKind::Tan: return std::tan(x);
    case ActKind::Atan: return std::atan(x);
    case ActKind::Round: return ref_round_half_even(x);
    case ActKind::Erf: return std::erf(x);
    case ActKind::Floor: return std::floor(x);
    case ActKind::Ceil: return std::ceil(x);
    case ActKind::Reciprocal: return 1 / x;
    case ActKind::Sign: return x > 0 ? 1 : (x < 0 ? -1 : 0);
    case ActKind::Softplus: return std::log(1 + std::exp(x));
    case ActKind::Asin: return std::asin(x);
    case ActKind::Acos: return std::acos(x);
    case ActKind::Not: return x == 0;
  }
  return NAN;
}

// Input range inside the kind's domain.
std::pair<double, double> domain(ActKind k) {
  switch (k) {
    case ActKind::Log: case ActKind::Sqrt: case ActKind::Rsqrt: return {0.05, 6};
    case ActKind::Asin: case ActKind::Acos: return {-0.99, 0.99};
    case ActKind::Tan: return {-1.3, 1.3};
    case ActKind::Exp: return {-6, 6};
    case ActKind::Round: case ActKind::Floor: case ActKind::Ceil: return {-20, 20};
    default: return {-4, 4};
  }
}

void check_act(ActKind k, DType t, const std::vector<int64_t>& dims, uint64_t seed) {
  SCOPED_TRACE(std::string(enum_name(k)) + " " + dtype_name(t) + " " + dims_str(dims));
  auto [lo, hi] = domain(k);
  if (is_int(t)) {
    lo = elemtest::is_unsigned(t) ? 0 : -100;
    hi = elemtest::is_unsigned(t) ? 200 : 100;
  }
  std::vector<double> v = uniform(t, product(dims), lo, hi, seed);
  if (k == ActKind::Reciprocal)
    for (auto& x : v) x = x < 0 ? std::min(x, -0.1) : std::max(x, 0.1);
  const Tensor in = from_doubles(t, dims, v);
  const auto x = to_doubles(in);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    want[i] = k == ActKind::Not && is_int(t) ? wrap_to(t, ~static_cast<int64_t>(x[i]))  // bitwise
              : is_int(t)                    ? wrap_to(t, static_cast<int64_t>(ref_act(k, x[i])))
                                             : ref_act(k, x[i]);
  const Tensor out = run_op(ops::Activation{k}, {in});
  EXPECT_EQ(out.dtype(), t);
  EXPECT_TRUE(all_close(out, dims, want));
}

TEST(ElementwiseActivation, EveryKindEveryDtype) {
  uint64_t seed = 1;
  for (ActKind k : kAllAct)
    for (DType t : elemtest::kAllTypes) {
      const bool ok = k == ActKind::Not ? t == DType::Bool || is_int(t)
                      : int_kind(k)     ? t != DType::Bool
                                        : is_float(t);
      if (!ok) continue;
      check_act(k, t, {3, 5}, seed++);
    }
}

TEST(ElementwiseActivation, LargeAndZeroSize) {
  check_act(ActKind::Gelu, DType::F32, {3, 20000}, 11);
  check_act(ActKind::Silu, DType::BF16, {40000}, 12);
  check_act(ActKind::Exp, DType::F16, {0, 5}, 13);
  check_act(ActKind::Not, DType::Bool, {17, 1000}, 14);
  check_act(ActKind::Abs, DType::I16, {2, 0}, 15);
}

TEST(ElementwiseActivation, RoundHalfToEven) {
  const std::vector<double> v = {-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, -0.51, 1e6 + 0.5, 2.4999};
  for (DType t : elemtest::kFloatTypes) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor in = from_doubles(t, {static_cast<int64_t>(v.size())}, v);
    const auto x = to_doubles(in);
    std::vector<double> want;
    for (double d : x) want.push_back(ref_round_half_even(d));
    EXPECT_TRUE(all_close(run_op(ops::Activation{ActKind::Round}, {in}), {static_cast<int64_t>(v.size())}, want,
                          {0, 0}));
  }
  const Tensor r = run_op(ops::Activation{ActKind::Round}, {from_doubles(DType::F64, {4}, {-2.5, 2.5, 4.5, -0.5})});
  EXPECT_EQ(to_doubles(r), (std::vector<double>{-2, 2, 4, -0.0}));
}

TEST(ElementwiseActivation, SpecialValues) {
  const double inf = INFINITY;
  auto act = [](ActKind k, std::vector<double> v) {
    return run_op(ops::Activation{k}, {from_doubles(DType::F32, {static_cast<int64_t>(v.size())}, v)});
  };
  EXPECT_TRUE(all_close(act(ActKind::Softplus, {100, -100, 0, inf, -inf}), {5},
                        {100, std::exp(-100.0), std::log(2.0), inf, 0}));
  EXPECT_TRUE(all_close(act(ActKind::Sigmoid, {-200, 200, NAN}), {3}, {0, 1, NAN}));
  EXPECT_TRUE(all_close(act(ActKind::Relu, {NAN, -1, 2}), {3}, {NAN, 0, 2}));
  EXPECT_TRUE(all_close(act(ActKind::Sign, {NAN, -0.0, 0, -3, 4}), {5}, {NAN, 0, 0, -1, 1}));
  EXPECT_TRUE(all_close(act(ActKind::Log, {0, -1}), {2}, {-inf, NAN}));
  EXPECT_TRUE(all_close(act(ActKind::Rsqrt, {0, 4}), {2}, {inf, 0.5}));
  EXPECT_TRUE(all_close(act(ActKind::Reciprocal, {0, -0.0}), {2}, {inf, -inf}));
  EXPECT_TRUE(all_close(act(ActKind::Silu, {-1000, 1000}), {2}, {0, 1000}));
  EXPECT_TRUE(all_close(act(ActKind::Exp, {1000}), {1}, {inf}));
}

TEST(ElementwiseActivation, IntegerKinds) {
  for (DType t : elemtest::kIntTypes) {
    SCOPED_TRACE(dtype_name(t));
    const bool u = elemtest::is_unsigned(t);
    const std::vector<double> v = u ? std::vector<double>{0, 1, 7, 200} : std::vector<double>{-100, -1, 0, 1, 100};
    const auto n = static_cast<int64_t>(v.size());
    const Tensor in = from_doubles(t, {n}, v);
    std::vector<double> neg, abs, relu, sign;
    for (double x : v) {
      neg.push_back(wrap_to(t, -static_cast<int64_t>(x)));
      abs.push_back(std::fabs(x));
      relu.push_back(x > 0 ? x : 0);
      sign.push_back(x > 0 ? 1 : (x < 0 ? -1 : 0));
    }
    EXPECT_TRUE(all_close(run_op(ops::Activation{ActKind::Neg}, {in}), {n}, neg));
    EXPECT_TRUE(all_close(run_op(ops::Activation{ActKind::Abs}, {in}), {n}, abs));
    EXPECT_TRUE(all_close(run_op(ops::Activation{ActKind::Relu}, {in}), {n}, relu));
    EXPECT_TRUE(all_close(run_op(ops::Activation{ActKind::Sign}, {in}), {n}, sign));
  }
  // Two's complement wrap: -INT_MIN and |INT_MIN| are INT_MIN.
  const int64_t mn = std::numeric_limits<int64_t>::min();
  const Tensor m = Tensor::i64({1}, std::vector<int64_t>{mn});
  EXPECT_EQ(run_op(ops::Activation{ActKind::Neg}, {m}).to_i64(), (std::vector<int64_t>{mn}));
  EXPECT_EQ(run_op(ops::Activation{ActKind::Abs}, {m}).to_i64(), (std::vector<int64_t>{mn}));
  EXPECT_EQ(to_doubles(run_op(ops::Activation{ActKind::Abs}, {from_doubles(DType::I8, {1}, {-128})})),
            (std::vector<double>{-128}));
}

TEST(ElementwiseActivation, RejectsWrongDtypes) {
  auto msg_for = [](ActKind k, DType t) {
    Graph g;
    Value x = g.input("x", Shape::of({2}, t));
    return error_message([&] { g.act(k, x); });
  };
  EXPECT_THAT(msg_for(ActKind::Exp, DType::I32), HasSubstr("needs a float input"));
  EXPECT_THAT(msg_for(ActKind::Gelu, DType::Bool), HasSubstr("needs a float input"));
  EXPECT_THAT(msg_for(ActKind::Round, DType::U8), HasSubstr("u8[2]"));
  EXPECT_THAT(msg_for(ActKind::Not, DType::F32), HasSubstr("needs a bool (logical not) or integer (bitwise not) input"));
  EXPECT_THAT(msg_for(ActKind::Neg, DType::Bool), HasSubstr("bool input"));
  EXPECT_THAT(msg_for(ActKind::Sign, DType::Bool), HasSubstr("bool input"));
}

}  // namespace
}  // namespace rlx
