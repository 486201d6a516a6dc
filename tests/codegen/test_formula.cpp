// The activation formula table (codegen/formula.h) against independent references, and the
// CPU Activation kernel against the formula (it evaluates the same table).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/vec_formula.h"
#include "codegen/formula.h"
#include "codegen/language.h"
#include "support/test_util.h"

namespace rlx::codegen {
namespace {

// References written differently from the table (erfc, explicit sigmoid, nearbyint, ...).
double reference(ActKind k, double x) {
  const double sig = 1.0 / (1.0 + std::exp(-x));
  switch (k) {
    case ActKind::Gelu: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case ActKind::GeluApprox: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case ActKind::Silu: return x * sig;
    case ActKind::Relu: return x > 0 ? x : 0.0;
    case ActKind::Sigmoid: return sig;
    case ActKind::Tanh: return std::tanh(x);
    case ActKind::Exp: return std::exp(x);
    case ActKind::Log: return std::log(x);
    case ActKind::Sqrt: return std::sqrt(x);
    case ActKind::Rsqrt: return std::pow(x, -0.5);
    case ActKind::Neg: return -x;
    case ActKind::Abs: return x < 0 ? -x : x;
    case ActKind::Sin: return std::sin(x);
    case ActKind::Cos: return std::cos(x);
    case ActKind::Tan: return std::tan(x);
    case ActKind::Atan: return std::atan(x);
    case ActKind::Round: return std::nearbyint(x);
    case ActKind::Erf: return std::erf(x);
    case ActKind::Floor: return std::floor(x);
    case ActKind::Ceil: return std::ceil(x);
    case ActKind::Reciprocal: return 1.0 / x;
    case ActKind::Sign: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
    case ActKind::Softplus: return x > 30 ? x : std::log(1.0 + std::exp(x));
    case ActKind::Asin: return std::asin(x);
    case ActKind::Acos: return std::acos(x);
    case ActKind::Not: break;
  }
  return 0;
}

std::vector<ActKind> float_kinds() {
  std::vector<ActKind> ks;
  for (int i = 0; i <= static_cast<int>(ActKind::Not); ++i)
    if (has_float_formula(static_cast<ActKind>(i))) ks.push_back(static_cast<ActKind>(i));
  return ks;
}

TEST(Formula, EveryActivationButNotHasOne) {
  EXPECT_EQ(float_kinds().size(), static_cast<size_t>(ActKind::Not));
  EXPECT_FALSE(has_float_formula(ActKind::Not));
  EXPECT_THROW(eval_activation(ActKind::Not, 1.0), Error);
}

TEST(Formula, MatchesIndependentReferences) {
  for (ActKind k : float_kinds()) {
    SCOPED_TRACE(enum_name(k));
    for (double x : {-7.5, -2.5, -1.0, -0.5, -0.3, -1e-3, 0.0, 1e-3, 0.25, 0.5, 0.7, 1.5, 2.5, 6.0, 40.0}) {
      const bool domain_unit = k == ActKind::Asin || k == ActKind::Acos;
      const bool domain_pos = k == ActKind::Log || k == ActKind::Sqrt || k == ActKind::Rsqrt;
      if ((domain_unit && std::fabs(x) > 1) || (domain_pos && x <= 0)) continue;
      const double want = reference(k, x), got = eval_activation(k, x);
      if (got == want) continue;  // also the infinities (Reciprocal(0))
      EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::fabs(want))) << "x = " << x;
    }
  }
}

TEST(Formula, KeepsNanAndSignedZeroWhereSpecified) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (ActKind k : {ActKind::Relu, ActKind::Sign, ActKind::Abs, ActKind::Softplus, ActKind::Gelu})
    EXPECT_TRUE(std::isnan(eval_activation(k, nan))) << enum_name(k);
  EXPECT_TRUE(std::signbit(eval_activation(ActKind::Sign, -0.0)));
  EXPECT_EQ(eval_activation(ActKind::Round, 2.5), 2.0);
  EXPECT_EQ(eval_activation(ActKind::Round, -3.5), -4.0);
  EXPECT_EQ(eval_activation(ActKind::Softplus, 1000.0), 1000.0);  // no overflow
}

TEST(Formula, ListsTheMathFunctionsItCalls) {
  EXPECT_EQ(activation_math_fns(ActKind::Gelu), std::vector<MathFn>{MathFn::Erf});
  EXPECT_EQ(activation_math_fns(ActKind::Relu), std::vector<MathFn>{});
  EXPECT_EQ(activation_math_fns(ActKind::Softplus),
            (std::vector<MathFn>{MathFn::Abs, MathFn::Exp, MathFn::Log1p, MathFn::Max}));  // innermost first
  EXPECT_TRUE(activation_math_fns(ActKind::Not).empty());
}

// Activation k's formula evaluated in f32.
float eval_f32(ActKind k, float x) {
  switch (k) {
#define RLX_CASE(K) \
  case ActKind::K: return ActFormula<ActKind::K>::eval(x);
    RLX_FLOAT_ACTIVATIONS(RLX_CASE)
#undef RLX_CASE
    case ActKind::Not: break;
  }
  return 0;
}

// True when the CPU evaluates kind k's f32 formula on vector lanes (backends/cpu/vec_formula.h).
bool cpu_vector_kind(ActKind k) {
  switch (k) {
#define RLX_CASE(K) \
  case ActKind::K: return cpu::vectorized_activation<ActKind::K>();
    RLX_FLOAT_ACTIVATIONS(RLX_CASE)
#undef RLX_CASE
    case ActKind::Not: break;
  }
  return false;
}

// The CPU kernel evaluates the same formula in the compute type, rounding once on store (on f32
// with the vector math functions where the formula has a vector evaluation: within a few ulp).
TEST(Formula, CpuActivationKernelEvaluatesTheTable) {
  const std::vector<double> xs = {-3.0, -0.7, -0.1, 0.0, 0.2, 0.9, 2.0};
  for (ActKind k : float_kinds()) {
    SCOPED_TRACE(enum_name(k));
    for (DType t : {DType::F32, DType::F64, DType::F16}) {
      const Tensor x = testing::from_doubles(t, {static_cast<int64_t>(xs.size())}, xs);
      const auto got = testing::to_doubles(testing::run_op(ops::Activation{k}, {x}));
      const auto in = testing::to_doubles(x);
      for (size_t i = 0; i < xs.size(); ++i) {
        const double want =
            t == DType::F64
                ? eval_activation(k, in[i])
                : testing::to_doubles(testing::from_doubles(t, {1}, {eval_f32(k, static_cast<float>(in[i]))}))[0];
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(got[i]));
        else if (t == DType::F32 && cpu_vector_kind(k) && std::isfinite(want))  // vec math: a few ulp from libm's
          EXPECT_NEAR(got[i], want, 8 * std::numeric_limits<float>::epsilon() * std::max(1.0, std::fabs(want)))
              << dtype_name(t) << " x = " << in[i];
        else EXPECT_EQ(got[i], want) << dtype_name(t) << " x = " << in[i];
      }
    }
  }
}

TEST(Formula, EveryLanguageSpellsEveryFormula) {
  for (LangId l : {LangId::Cuda, LangId::Glsl, LangId::Wgsl}) {
    Helpers h;
    const auto p = language(l).float_printer(DType::F32, h);
    for (ActKind k : float_kinds()) EXPECT_FALSE(print_activation(k, *p, "x").empty()) << lang_name(l);
  }
  Helpers h;
  EXPECT_EQ(print_activation(ActKind::Gelu, *cuda_language().float_printer(DType::F32, h), "x"),
            "((0.5f * x) * (1.0f + erff((x * 0.707106769f))))");
  EXPECT_EQ(print_activation(ActKind::Gelu, *cuda_language().float_printer(DType::F64, h), "x"),
            "((0.5 * x) * (1.0 + erf((x * 0.70710678118654757))))");
  EXPECT_TRUE(h.items.empty());  // CUDA has every function natively
  Helpers g;
  EXPECT_NE(print_activation(ActKind::Gelu, *glsl_language().float_printer(DType::F32, g), "x").find("rlx_erf_float("),
            std::string::npos);
  EXPECT_TRUE(g.has("rlx_erf_float"));
}

TEST(Formula, FloatLiteralsRoundTrip) {
  EXPECT_EQ(float_literal(1.0, DType::F32), "1.0");
  EXPECT_EQ(float_literal(0.5, DType::F32, "f"), "0.5f");
  EXPECT_EQ(float_literal(1e30, DType::F64, "lf"), "1e+30lf");
  EXPECT_EQ(std::stof(float_literal(0.1, DType::F32)), 0.1f);
  EXPECT_EQ(std::stod(float_literal(0.1, DType::F64)), 0.1);
  EXPECT_THROW(float_literal(std::numeric_limits<double>::infinity(), DType::F32), Error);
}

}  // namespace
}  // namespace rlx::codegen
