#pragma once
// The activations' formulas (codegen/formula.h) evaluated on f32 vector lanes. VecEval<F> walks
// the same expression type as F::eval (X, constants, + - * /, negation, selects, math calls) in
// the same order, lane-wise; the math calls map to the vector functions of vec_math.h (exp,
// tanh, erf, abs, max, round-even, floor, ceil). Everything here is always inlined, so no vector crosses a call between
// the AVX2 and the generic code (vec_math.h). A formula calling another function (log, sin, ...)
// has no vector evaluation: vectorized_activation<K>() is false and it keeps the scalar path.
#include <type_traits>

#include "backends/cpu/vec_math.h"
#include "codegen/formula.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // see vec_math.h

namespace rlx::cpu {

namespace vecf {

namespace f = codegen::formula;
using codegen::MathFn;

constexpr bool has_vector_fn(MathFn m) {
  return m == MathFn::Exp || m == MathFn::Tanh || m == MathFn::Erf || m == MathFn::Abs || m == MathFn::Max ||
         m == MathFn::RoundEven || m == MathFn::Floor || m == MathFn::Ceil;
}

template <class F> struct VecEval {
  static constexpr bool ok = false;
};
template <> struct VecEval<f::X> {
  static constexpr bool ok = true;
  template <class V> static RLX_VEC_INLINE V eval(const V& x) { return x; }
};
template <class K> struct VecEval<f::K<K>> {
  static constexpr bool ok = true;
  template <class V> static RLX_VEC_INLINE V eval(const V&) { return vec::splat<V>(static_cast<float>(K::value)); }
};
template <char Op, class A, class B> struct VecEval<f::Arith<Op, A, B>> {
  static constexpr bool ok = VecEval<A>::ok && VecEval<B>::ok;
  template <class V> static RLX_VEC_INLINE V eval(const V& x) {
    const V a = VecEval<A>::eval(x), b = VecEval<B>::eval(x);
    if constexpr (Op == '+') return a + b;
    else if constexpr (Op == '-') return a - b;
    else if constexpr (Op == '*') return a * b;
    else return a / b;
  }
};
template <class A> struct VecEval<f::Neg<A>> {
  static constexpr bool ok = VecEval<A>::ok;
  template <class V> static RLX_VEC_INLINE V eval(const V& x) { return -VecEval<A>::eval(x); }
};
template <MathFn M, class V> RLX_VEC_INLINE V math(const V& a, const V& b) {
  if constexpr (M == MathFn::Exp) return vec::exp(a);
  else if constexpr (M == MathFn::Tanh) return vec::tanh(a);
  else if constexpr (M == MathFn::Erf) return vec::erf(a);
  else if constexpr (M == MathFn::Abs) return vec::abs(a);
  else if constexpr (M == MathFn::RoundEven) return vec::round_even(a);
  else if constexpr (M == MathFn::Floor) return vec::floor(a);
  else if constexpr (M == MathFn::Ceil) return vec::ceil(a);
  else return vec::select<V>(a < b, b, a);  // Max: (a < b) ? b : a
}
template <MathFn M, class A> struct VecEval<f::Call<M, A>> {
  static constexpr bool ok = has_vector_fn(M) && VecEval<A>::ok;
  template <class V> static RLX_VEC_INLINE V eval(const V& x) { return math<M>(VecEval<A>::eval(x), V{}); }
};
template <MathFn M, class A, class B> struct VecEval<f::Call2<M, A, B>> {
  static constexpr bool ok = has_vector_fn(M) && VecEval<A>::ok && VecEval<B>::ok;
  template <class V> static RLX_VEC_INLINE V eval(const V& x) { return math<M>(VecEval<A>::eval(x), VecEval<B>::eval(x)); }
};
// (A < B) ? T : F, or (A > B) when Greater, lane by lane; a NaN compares false and takes F.
template <bool Greater, class A, class B, class T, class F> struct VecEval<f::Select<Greater, A, B, T, F>> {
  static constexpr bool ok = VecEval<A>::ok && VecEval<B>::ok && VecEval<T>::ok && VecEval<F>::ok;
  template <class V> static RLX_VEC_INLINE V eval(const V& x) {
    const V a = VecEval<A>::eval(x), b = VecEval<B>::eval(x);
    if constexpr (Greater) return vec::select<V>(a > b, VecEval<T>::eval(x), VecEval<F>::eval(x));
    else return vec::select<V>(a < b, VecEval<T>::eval(x), VecEval<F>::eval(x));
  }
};

}  // namespace vecf

// True when activation K's formula has a vector evaluation (every math function it calls has a
// vector version).
template <ActKind K>
constexpr bool vectorized_activation() {
  if constexpr (K == ActKind::Not) return false;
  else return vecf::VecEval<codegen::ActFormula<K>>::ok;
}

// Activation K's formula on the lanes of v.
template <ActKind K, class V>
RLX_VEC_INLINE V eval_activation(const V& v) {
  static_assert(vectorized_activation<K>());
  return vecf::VecEval<codegen::ActFormula<K>>::eval(v);
}

}  // namespace rlx::cpu

#pragma GCC diagnostic pop
