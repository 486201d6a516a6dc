// CPU kernel for Activation (unary elementwise ops).
//
// Floats compute in the compute type (f32 for f16/bf16/f32, f64 for f64) and round once on
// store, with the formulas every GPU printer also uses (codegen/formula.h): Round is
// half-to-even, Gelu the exact erf form, GeluApprox the tanh form, Softplus the overflow-free
// max(x, 0) + log1p(exp(-|x|)). Relu and Sign keep NaN; Sign keeps the sign of 0. On f32, the
// kinds whose formula calls only exp / tanh evaluate it on vector lanes with vec::exp / vec::tanh
// (vec_math.h: at most 2 / 3 ulp from the libm functions); f16 / bf16 widen to f32 chunks for it.
// Integer Neg/Abs wrap (Abs(INT_MIN) = INT_MIN, two's complement); on unsigned dtypes Neg is
// the modular negation and Abs/Relu are the identity. Not is logical on bool, bitwise on integers.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "backends/cpu/elementwise_core.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_rows.h"
#include "codegen/formula.h"

namespace rlx::cpu {
namespace {

template <ActKind K, DType D>
constexpr bool act_supported() {
  if constexpr (K == ActKind::Not) return D == DType::Bool || is_int_dtype(D);
  else if constexpr (K == ActKind::Neg || K == ActKind::Abs || K == ActKind::Relu || K == ActKind::Sign)
    return D != DType::Bool;
  else return is_float_dtype(D);
}

// The float math is the shared formula table (codegen/formula.h), evaluated in C.
template <ActKind K, class C>
inline C float_act(C x) {
  return codegen::ActFormula<K>::eval(x);
}

template <ActKind K, DType D>
struct ActFn {
  using T = storage_t<D>;
  T operator()(T x) const {
    if constexpr (K == ActKind::Not) {
      if constexpr (D == DType::Bool) return x ? 0 : 1;
      else return static_cast<T>(~x);  // bitwise on integers
    } else if constexpr (is_float_dtype(D)) {
      return store<T>(float_act<K, compute_t<T>>(load(x)));
    } else if constexpr (K == ActKind::Neg) {
      return wrap_sub(T(0), x);
    } else if constexpr (std::is_signed_v<T>) {
      if constexpr (K == ActKind::Abs) return x < 0 ? wrap_sub(T(0), x) : x;
      else if constexpr (K == ActKind::Relu) return x < 0 ? T(0) : x;
      else return static_cast<T>((x > 0) - (x < 0));  // Sign
    } else {
      if constexpr (K == ActKind::Sign) return x > 0 ? T(1) : T(0);
      else return x;  // Abs, Relu on unsigned
    }
  }
};

template <ActKind K>
void act_typed(DType t, const void* in, void* out, int64_t n) {
  visit_dtype(t, [&]<DType D>() {
    if constexpr (act_supported<K, D>()) {
      using T = storage_t<D>;
      const auto* x = static_cast<const T*>(in);
      auto* y = static_cast<T*>(out);
      const ActFn<K, D> f;
      for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
    } else {
      throw Error(std::string("activation ") + enum_name(K) + ": dtype " + dtype_name(D) + " is not supported");
    }
  });
}

// f16 / bf16 through f32 chunks on vector lanes: each value widened, the f32 formula, rounded
// once on store (the scalar path's arithmetic with the vector math functions). False when k has
// no vector path.
template <class T>
bool half_activation(ActKind k, const T* x, T* y, int64_t n) {
  constexpr int64_t kChunk = 256;
  float buf[kChunk];
  if (!activation_f32(k, nullptr, nullptr, 0)) return false;  // no vector path for k
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t c = std::min(kChunk, n - i);
    if constexpr (std::is_same_v<T, f16>) {
      f16_to_f32(x + i, buf, c);
      activation_f32(k, buf, buf, c);
      f32_to_f16(buf, y + i, c);
    } else {
      for (int64_t j = 0; j < c; ++j) buf[j] = load(x[i + j]);
      activation_f32(k, buf, buf, c);
      for (int64_t j = 0; j < c; ++j) y[i + j] = store<T>(buf[j]);
    }
  }
  return true;
}

}  // namespace

void activation_span(ActKind k, DType t, const void* in, void* out, int64_t n) {
  // Float kinds whose formula the vector math covers run on vector lanes (vec_rows.h).
  if (t == DType::F32 && activation_f32(k, static_cast<const float*>(in), static_cast<float*>(out), n)) return;
  if (t == DType::F16 && n > 0 && half_activation(k, static_cast<const f16*>(in), static_cast<f16*>(out), n)) return;
  if (t == DType::BF16 && n > 0 && half_activation(k, static_cast<const bf16*>(in), static_cast<bf16*>(out), n))
    return;
  switch (k) {
#define RLX_ACT_CASE(K) \
  case ActKind::K: return act_typed<ActKind::K>(t, in, out, n);
    RLX_ACT_CASE(Gelu) RLX_ACT_CASE(GeluApprox) RLX_ACT_CASE(Silu) RLX_ACT_CASE(Relu) RLX_ACT_CASE(Sigmoid)
    RLX_ACT_CASE(Tanh) RLX_ACT_CASE(Exp) RLX_ACT_CASE(Log) RLX_ACT_CASE(Sqrt) RLX_ACT_CASE(Rsqrt)
    RLX_ACT_CASE(Neg) RLX_ACT_CASE(Abs) RLX_ACT_CASE(Sin) RLX_ACT_CASE(Cos) RLX_ACT_CASE(Tan)
    RLX_ACT_CASE(Atan) RLX_ACT_CASE(Round) RLX_ACT_CASE(Erf) RLX_ACT_CASE(Floor) RLX_ACT_CASE(Ceil)
    RLX_ACT_CASE(Reciprocal) RLX_ACT_CASE(Sign) RLX_ACT_CASE(Softplus) RLX_ACT_CASE(Asin) RLX_ACT_CASE(Acos)
    RLX_ACT_CASE(Not)
#undef RLX_ACT_CASE
  }
  throw Error("activation: corrupt kind value " + std::to_string(static_cast<int>(k)));
}

void kernel(const ops::Activation& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  const int64_t n = y.numel();
  const size_t es = dtype_size(x.dtype());
  const auto* pin = static_cast<const uint8_t*>(x.raw());
  auto* pout = static_cast<uint8_t*>(y.raw());
  parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    activation_span(op.kind, x.dtype(), pin + static_cast<size_t>(b) * es, pout + static_cast<size_t>(b) * es, e - b);
  });
}

}  // namespace rlx::cpu
