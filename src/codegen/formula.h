#pragma once
// One definition of the floating-point math of the activations.
//
// Each float activation is a small expression type over one variable X (e.g. Gelu is
// 0.5 * x * (1 + erf(x * 1/sqrt(2)))). The same type is
//   - evaluated by the CPU kernels: `F::eval(x)` inlines to the plain C++ expression in the
//     compute type (float for f32/f16/bf16, double for f64), in the order written here;
//   - printed by every kernel language (CUDA C++, GLSL, WGSL) through an ExprPrinter, which
//     spells constants, calls and selects in that language.
// So the CPU oracle and the generated GPU kernels cannot drift apart.
//
// Integer and bool activations (Neg, Abs, Relu, Sign, Not) are not formulas: their wrap and
// signedness rules differ per dtype and are written by each kernel's integer path.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "rlx/ops.h"

namespace rlx::codegen {

// The math functions a formula may call. Semantics (what every printer must reproduce, within
// the language's documented precision): C <cmath> with round-to-nearest-even for RoundEven and
// max(a, b) = (a < b) ? b : a.
enum class MathFn : uint8_t {
  Exp, Log, Log1p, Tanh, Erf, Sqrt, Sin, Cos, Tan, Atan, Asin, Acos, Floor, Ceil, RoundEven, Abs, Max
};
const char* math_fn_name(MathFn f);
inline constexpr int kMathFnCount = static_cast<int>(MathFn::Max) + 1;

// How a language spells the pieces of a formula, for one compute type.
class ExprPrinter {
 public:
  virtual ~ExprPrinter() = default;
  virtual std::string literal(double v) const = 0;
  virtual std::string call(MathFn f, const std::vector<std::string>& args) const = 0;
  // `op` is one of + - * /.
  virtual std::string arith(char op, const std::string& a, const std::string& b) const {
    return "(" + a + " " + op + " " + b + ")";
  }
  virtual std::string neg(const std::string& a) const { return "(-" + a + ")"; }
  // `op` is "<" or ">"; the result is the language's boolean condition.
  virtual std::string less_greater(const char* op, const std::string& a, const std::string& b) const {
    return "(" + a + " " + op + " " + b + ")";
  }
  virtual std::string select(const std::string& cond, const std::string& t, const std::string& f) const = 0;
};

// C++ evaluation of a math function in compute type C.
template <class C>
inline C eval_math(MathFn f, C a, C b = C(0)) {
  switch (f) {
    case MathFn::Exp: return std::exp(a);
    case MathFn::Log: return std::log(a);
    case MathFn::Log1p: return std::log1p(a);
    case MathFn::Tanh: return std::tanh(a);
    case MathFn::Erf: return std::erf(a);
    case MathFn::Sqrt: return std::sqrt(a);
    case MathFn::Sin: return std::sin(a);
    case MathFn::Cos: return std::cos(a);
    case MathFn::Tan: return std::tan(a);
    case MathFn::Atan: return std::atan(a);
    case MathFn::Asin: return std::asin(a);
    case MathFn::Acos: return std::acos(a);
    case MathFn::Floor: return std::floor(a);
    case MathFn::Ceil: return std::ceil(a);
    case MathFn::RoundEven: {
      C r = std::round(a);  // half away from zero, then ties moved to the even neighbour
      if (std::fabs(a - r) == C(0.5)) r = C(2) * std::round(a * C(0.5));
      return r;
    }
    case MathFn::Abs: return std::fabs(a);
    case MathFn::Max: return std::max(a, b);
  }
  return a;
}

namespace formula {

// The variable.
struct X {
  template <class C> static C eval(C x) { return x; }
  static std::string print(const ExprPrinter&, const std::string& x) { return x; }
};
// A constant: V::value (a type, since clang 16 takes no floating-point template arguments).
template <class V>
struct K {
  template <class C> static C eval(C) { return C(V::value); }
  static std::string print(const ExprPrinter& p, const std::string&) { return p.literal(V::value); }
};
#define RLX_FORMULA_CONSTANT(NAME, V) \
  struct NAME {                      \
    static constexpr double value = V; \
  };
RLX_FORMULA_CONSTANT(CZero, 0.0)
RLX_FORMULA_CONSTANT(COne, 1.0)
RLX_FORMULA_CONSTANT(CMinusOne, -1.0)
RLX_FORMULA_CONSTANT(CHalf, 0.5)
RLX_FORMULA_CONSTANT(CInvSqrt2, 0.70710678118654752440)     // 1/sqrt(2)
RLX_FORMULA_CONSTANT(CSqrt2OverPi, 0.79788456080286535588)  // sqrt(2/pi)
RLX_FORMULA_CONSTANT(CGeluCubic, 0.044715)
#undef RLX_FORMULA_CONSTANT
template <char Op, class A, class B>
struct Arith {
  template <class C> static C eval(C x) {
    const C a = A::eval(x), b = B::eval(x);
    if constexpr (Op == '+') return a + b;
    else if constexpr (Op == '-') return a - b;
    else if constexpr (Op == '*') return a * b;
    else return a / b;
  }
  static std::string print(const ExprPrinter& p, const std::string& x) {
    return p.arith(Op, A::print(p, x), B::print(p, x));
  }
};
template <class A, class B> using Add = Arith<'+', A, B>;
template <class A, class B> using Sub = Arith<'-', A, B>;
template <class A, class B> using Mul = Arith<'*', A, B>;
template <class A, class B> using Div = Arith<'/', A, B>;
template <class A>
struct Neg {
  template <class C> static C eval(C x) { return -A::eval(x); }
  static std::string print(const ExprPrinter& p, const std::string& x) { return p.neg(A::print(p, x)); }
};
template <MathFn F, class A>
struct Call {
  template <class C> static C eval(C x) { return eval_math<C>(F, A::eval(x)); }
  static std::string print(const ExprPrinter& p, const std::string& x) { return p.call(F, {A::print(p, x)}); }
};
template <MathFn F, class A, class B>
struct Call2 {
  template <class C> static C eval(C x) { return eval_math<C>(F, A::eval(x), B::eval(x)); }
  static std::string print(const ExprPrinter& p, const std::string& x) {
    return p.call(F, {A::print(p, x), B::print(p, x)});
  }
};
// (A < B) ? T : F, or (A > B) ? T : F when Greater. A NaN compares false, so it takes F.
template <bool Greater, class A, class B, class T, class F>
struct Select {
  template <class C> static C eval(C x) {
    const C a = A::eval(x), b = B::eval(x);
    return (Greater ? a > b : a < b) ? T::eval(x) : F::eval(x);
  }
  static std::string print(const ExprPrinter& p, const std::string& x) {
    return p.select(p.less_greater(Greater ? ">" : "<", A::print(p, x), B::print(p, x)), T::print(p, x), F::print(p, x));
  }
};
template <class A, class B, class T, class F> using IfLess = Select<false, A, B, T, F>;
template <class A, class B, class T, class F> using IfGreater = Select<true, A, B, T, F>;

}  // namespace formula

namespace formula {

// The formula of each float activation (Not has none: it is bool-only).
template <ActKind Kind>
struct ActFormula;

using One = K<COne>;
using Zero = K<CZero>;
#define RLX_FORMULA(KIND, ...) \
  template <>                  \
  struct ActFormula<ActKind::KIND> { using type = __VA_ARGS__; };
RLX_FORMULA(Gelu, Mul<Mul<K<CHalf>, X>, Add<One, Call<MathFn::Erf, Mul<X, K<CInvSqrt2>>>>>)
RLX_FORMULA(GeluApprox,
            Mul<Mul<K<CHalf>, X>, Add<One, Call<MathFn::Tanh, Mul<K<CSqrt2OverPi>,
                                                                 Add<X, Mul<Mul<Mul<K<CGeluCubic>, X>, X>, X>>>>>>)
RLX_FORMULA(Silu, Div<X, Add<One, Call<MathFn::Exp, Neg<X>>>>)
RLX_FORMULA(Relu, IfLess<X, Zero, Zero, X>)  // NaN stays NaN
RLX_FORMULA(Sigmoid, Div<One, Add<One, Call<MathFn::Exp, Neg<X>>>>)
RLX_FORMULA(Tanh, Call<MathFn::Tanh, X>)
RLX_FORMULA(Exp, Call<MathFn::Exp, X>)
RLX_FORMULA(Log, Call<MathFn::Log, X>)
RLX_FORMULA(Sqrt, Call<MathFn::Sqrt, X>)
RLX_FORMULA(Rsqrt, Div<One, Call<MathFn::Sqrt, X>>)
RLX_FORMULA(Neg, Neg<X>)
RLX_FORMULA(Abs, Call<MathFn::Abs, X>)
RLX_FORMULA(Sin, Call<MathFn::Sin, X>)
RLX_FORMULA(Cos, Call<MathFn::Cos, X>)
RLX_FORMULA(Tan, Call<MathFn::Tan, X>)
RLX_FORMULA(Atan, Call<MathFn::Atan, X>)
RLX_FORMULA(Round, Call<MathFn::RoundEven, X>)
RLX_FORMULA(Erf, Call<MathFn::Erf, X>)
RLX_FORMULA(Floor, Call<MathFn::Floor, X>)
RLX_FORMULA(Ceil, Call<MathFn::Ceil, X>)
RLX_FORMULA(Reciprocal, Div<One, X>)
RLX_FORMULA(Sign, IfGreater<X, Zero, One, IfLess<X, Zero, K<CMinusOne>, X>>)  // keeps NaN and the sign of 0
// Overflow-free: max(x, 0) + log1p(exp(-|x|)).
RLX_FORMULA(Softplus, Add<Call2<MathFn::Max, X, Zero>, Call<MathFn::Log1p, Call<MathFn::Exp, Neg<Call<MathFn::Abs, X>>>>>)
RLX_FORMULA(Asin, Call<MathFn::Asin, X>)
RLX_FORMULA(Acos, Call<MathFn::Acos, X>)
#undef RLX_FORMULA

}  // namespace formula

// Activation `Kind`'s formula type.
template <ActKind Kind>
using ActFormula = typename formula::ActFormula<Kind>::type;

// The activations with a float formula, for switch-free iteration: every ActKind but Not.
#define RLX_FLOAT_ACTIVATIONS(M)                                                                       \
  M(Gelu) M(GeluApprox) M(Silu) M(Relu) M(Sigmoid) M(Tanh) M(Exp) M(Log) M(Sqrt) M(Rsqrt) M(Neg) M(Abs) \
  M(Sin) M(Cos) M(Tan) M(Atan) M(Round) M(Erf) M(Floor) M(Ceil) M(Reciprocal) M(Sign) M(Softplus)    \
  M(Asin) M(Acos)

// True when activation `k` has a float formula.
bool has_float_formula(ActKind k);
// Activation `k`'s formula applied to expression `x`, spelled by `p`; rlx::Error for Not.
std::string print_activation(ActKind k, const ExprPrinter& p, const std::string& x);
// The math functions activation `k`'s formula calls (empty for Not).
std::vector<MathFn> activation_math_fns(ActKind k);
// Evaluates activation `k`'s formula in double (the reference of the formula-table tests).
double eval_activation(ActKind k, double x);

}  // namespace rlx::codegen
