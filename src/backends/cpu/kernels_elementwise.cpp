// CPU kernels for Binary, Compare and Where (numpy broadcasting).
//
// Semantics (shape inference in src/ir/ops_elementwise.cpp enforces the dtype rules):
//  - Floats follow IEEE: x/0 = +-inf or NaN, Pow is std::pow, Max/Min propagate NaN,
//    Mod is floored (result has the divisor's sign, like Python), FMod truncated (std::fmod).
//    f16/bf16 compute in f32 and round once on store.
//  - Integers wrap on overflow (two's complement, no UB): Add/Sub/Mul/Pow and the one
//    overflowing quotient INT_MIN / -1 (= INT_MIN). Div truncates toward zero (like C);
//    Mod is floored, FMod truncated. A zero divisor in Div/Mod/FMod is a run-time rlx::Error.
//    Pow with a negative exponent is the truncated real result: 1 for base 1, +-1 for base -1,
//    0 for |base| > 1, and an rlx::Error for base 0.
//  - Bool: And/Or/Xor, and Max (= or) / Min (= and).
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "backends/cpu/elementwise_core.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_math.h"
#include "backends/cpu/vec_rows.h"

namespace rlx::cpu {
namespace {

template <class T>
T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
      if (base == 0) throw Error("binary pow: integer 0 raised to the negative power " + std::to_string(exp));
      return 0;
    }
  }
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  auto e = static_cast<uint64_t>(exp);
  while (e) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<T>(result);
}

template <class C>
inline C float_mod(C a, C b) {  // floored
  C r = std::fmod(a, b);
  if (r != 0) {
    if ((r < 0) != (b < 0)) r += b;
  } else {
    r = std::copysign(C(0), b);
  }
  return r;
}

template <BinaryKind K, DType D>
constexpr bool binary_supported() {
  if constexpr (K == BinaryKind::And || K == BinaryKind::Or || K == BinaryKind::Xor)
    return D == DType::Bool || is_int_dtype(D);
  else if constexpr (K == BinaryKind::Shl || K == BinaryKind::Shr)
    return is_int_dtype(D) && std::is_unsigned_v<storage_t<D>>;
  else if constexpr (K == BinaryKind::Max || K == BinaryKind::Min) return true;
  else return D != DType::Bool;
}

template <BinaryKind K, DType D>
struct BinFn {
  using T = storage_t<D>;
  T operator()(T x, T y) const {
    if constexpr (D == DType::Bool) {
      const uint8_t a = x != 0, b = y != 0;
      if constexpr (K == BinaryKind::And || K == BinaryKind::Min) return a & b;
      else if constexpr (K == BinaryKind::Or || K == BinaryKind::Max) return a | b;
      else return a ^ b;
    } else if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using C = compute_t<T>;
      const C a = load(x), b = load(y);
      C r;
      if constexpr (K == BinaryKind::Add) r = a + b;
      else if constexpr (K == BinaryKind::Sub) r = a - b;
      else if constexpr (K == BinaryKind::Mul) r = a * b;
      else if constexpr (K == BinaryKind::Div) r = a / b;
      else if constexpr (K == BinaryKind::Max) r = (a > b || a != a) ? a : b;
      else if constexpr (K == BinaryKind::Min) r = (a < b || a != a) ? a : b;
      else if constexpr (K == BinaryKind::Pow) r = std::pow(a, b);
      else if constexpr (K == BinaryKind::Mod) r = float_mod(a, b);
      else r = std::fmod(a, b);  // FMod
      return store<T>(r);
    } else {  // integers; zero divisors were rejected before the loop
      [[maybe_unused]] constexpr T kBits = static_cast<T>(8 * sizeof(T));
      if constexpr (K == BinaryKind::And) return static_cast<T>(x & y);
      else if constexpr (K == BinaryKind::Or) return static_cast<T>(x | y);
      else if constexpr (K == BinaryKind::Xor) return static_cast<T>(x ^ y);
      else if constexpr (K == BinaryKind::Shl) return y >= kBits ? T(0) : static_cast<T>(x << y);
      else if constexpr (K == BinaryKind::Shr) return y >= kBits ? T(0) : static_cast<T>(x >> y);
      else if constexpr (K == BinaryKind::Add) return wrap_add(x, y);
      else if constexpr (K == BinaryKind::Sub) return wrap_sub(x, y);
      else if constexpr (K == BinaryKind::Mul) return wrap_mul(x, y);
      else if constexpr (K == BinaryKind::Max) return x > y ? x : y;
      else if constexpr (K == BinaryKind::Min) return x < y ? x : y;
      else if constexpr (K == BinaryKind::Pow) return int_pow(x, y);
      else if constexpr (K == BinaryKind::Div) {
        if constexpr (std::is_signed_v<T>)
          if (y == -1) return wrap_sub(T(0), x);
        return static_cast<T>(x / y);
      } else if constexpr (K == BinaryKind::Mod) {
        if constexpr (std::is_signed_v<T>) {
          if (y == -1) return 0;
          T r = static_cast<T>(x % y);
          if (r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);
          return r;
        } else {
          return static_cast<T>(x % y);
        }
      } else {  // FMod
        if constexpr (std::is_signed_v<T>)
          if (y == -1) return 0;
        return static_cast<T>(x % y);
      }
    }
  }
};

bool needs_zero_check(BinaryKind k, DType t) {
  return is_int(t) && (k == BinaryKind::Div || k == BinaryKind::Mod || k == BinaryKind::FMod);
}

// Throws when any of the n elements (stride s) of the integer divisor is zero.
void check_divisor(BinaryKind k, DType t, const void* b, int64_t s, int64_t n) {
  if (n <= 0) return;
  const int64_t count = s == 0 ? 1 : n;
  visit_dtype(t, [&]<DType D>() {
    if constexpr (is_int_dtype(D)) {
      const auto* p = static_cast<const storage_t<D>*>(b);
      for (int64_t i = 0; i < count; ++i)
        if (p[i * s] == 0)
          throw Error(std::string("binary ") + enum_name(k) + ": integer division by zero (the " + dtype_name(t) +
                      " divisor has a 0 at flat index " + std::to_string(i) + ")");
    }
  });
}

// Calls body.template operator()<D>(fn) with the BinFn for (k, t).
template <class Body>
void with_binary_fn(BinaryKind k, DType t, Body&& body) {
  visit_dtype(t, [&]<DType D>() {
    auto go = [&]<BinaryKind K>() {
      if constexpr (binary_supported<K, D>()) body.template operator()<D>(BinFn<K, D>{});
      else
        throw Error(std::string("binary ") + enum_name(K) + ": dtype " + dtype_name(D) + " is not supported");
    };
    switch (k) {
      case BinaryKind::Add: return go.template operator()<BinaryKind::Add>();
      case BinaryKind::Sub: return go.template operator()<BinaryKind::Sub>();
      case BinaryKind::Mul: return go.template operator()<BinaryKind::Mul>();
      case BinaryKind::Div: return go.template operator()<BinaryKind::Div>();
      case BinaryKind::Max: return go.template operator()<BinaryKind::Max>();
      case BinaryKind::Min: return go.template operator()<BinaryKind::Min>();
      case BinaryKind::Pow: return go.template operator()<BinaryKind::Pow>();
      case BinaryKind::Mod: return go.template operator()<BinaryKind::Mod>();
      case BinaryKind::FMod: return go.template operator()<BinaryKind::FMod>();
      case BinaryKind::And: return go.template operator()<BinaryKind::And>();
      case BinaryKind::Or: return go.template operator()<BinaryKind::Or>();
      case BinaryKind::Xor: return go.template operator()<BinaryKind::Xor>();
      case BinaryKind::Shl: return go.template operator()<BinaryKind::Shl>();
      case BinaryKind::Shr: return go.template operator()<BinaryKind::Shr>();
    }
    throw Error("binary: corrupt kind value " + std::to_string(static_cast<int>(k)));
  });
}

template <CompareKind K, DType D>
struct CmpFn {
  using T = storage_t<D>;
  uint8_t operator()(T x, T y) const {
    const auto a = load(x), b = load(y);
    if constexpr (K == CompareKind::Eq) return a == b;
    else if constexpr (K == CompareKind::Ne) return a != b;
    else if constexpr (K == CompareKind::Lt) return a < b;
    else if constexpr (K == CompareKind::Le) return a <= b;
    else if constexpr (K == CompareKind::Gt) return a > b;
    else return a >= b;
  }
};

template <class Body>
void with_compare_fn(CompareKind k, DType t, Body&& body) {
  visit_dtype(t, [&]<DType D>() {
    switch (k) {
      case CompareKind::Eq: return body.template operator()<D>(CmpFn<CompareKind::Eq, D>{});
      case CompareKind::Ne: return body.template operator()<D>(CmpFn<CompareKind::Ne, D>{});
      case CompareKind::Lt: return body.template operator()<D>(CmpFn<CompareKind::Lt, D>{});
      case CompareKind::Le: return body.template operator()<D>(CmpFn<CompareKind::Le, D>{});
      case CompareKind::Gt: return body.template operator()<D>(CmpFn<CompareKind::Gt, D>{});
      case CompareKind::Ge: return body.template operator()<D>(CmpFn<CompareKind::Ge, D>{});
    }
    throw Error("compare: corrupt kind value " + std::to_string(static_cast<int>(k)));
  });
}

template <class U>
inline void where_row(const uint8_t* c, int64_t sc, const U* a, int64_t sa, const U* b, int64_t sb, U* o,
                      int64_t n) {
  if (sc == 1 && sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? a[i] : b[i];
  } else if (sc == 0) {
    copy_row(c[0] ? a : b, c[0] ? sa : sb, o, n);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = c[i * sc] ? a[i * sa] : b[i * sb];
  }
}

// Shared driver of Binary and Compare: typed broadcast loop over the two operands.
template <class Out, class Fn, class T>
void run_binary_like(const Tensor& a, const Tensor& b, Tensor& out, const Fn& fn) {
  const auto* pa = static_cast<const T*>(a.raw());
  const auto* pb = static_cast<const T*>(b.raw());
  auto* po = static_cast<Out*>(out.raw());
  const int64_t n = out.numel();
  if (n == 0) return;
  if (a.numel() == n && b.numel() == n) {  // same shape (up to leading 1s): one flat loop
    parallel_for(n, kElementwiseGrain,
                 [&](int64_t s, int64_t e) { binary_row(pa + s, 1, pb + s, 1, po + s, e - s, fn); });
    return;
  }
  const auto plan = make_plan<2>(out.shape(), {&a.shape(), &b.shape()});
  parallel_rows<2>(plan, [&](const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st, int64_t pos,
                             int64_t cnt) { binary_row(pa + off[0], st[0], pb + off[1], st[1], po + pos, cnt, fn); });
}

}  // namespace

#if RLX_VEC_X86
// The f32 row loop of one kind compiled for AVX2: the same scalar formula (BinFn) vectorized 8
// lanes wide instead of 4 (IEEE add / sub / mul / div and compare-selects: the same bits).
template <BinaryKind K>
RLX_VEC_AVX2 void binary_row_f32_avx2(const float* a, int64_t sa, const float* b, int64_t sb, float* o, int64_t n) {
  binary_row(a, sa, b, sb, o, n, BinFn<K, DType::F32>{});
}

// True when the f32 row of kind k ran on the AVX2 loop (element-wise and scalar-broadcast rows).
bool binary_span_f32_avx2(BinaryKind k, const void* a, int64_t sa, const void* b, int64_t sb, void* out, int64_t n) {
  if ((sa != 0 && sa != 1) || (sb != 0 && sb != 1) || n < 16 || !vec::has_avx2()) return false;
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  auto* o = static_cast<float*>(out);
  switch (k) {
    case BinaryKind::Add: binary_row_f32_avx2<BinaryKind::Add>(x, sa, y, sb, o, n); return true;
    case BinaryKind::Sub: binary_row_f32_avx2<BinaryKind::Sub>(x, sa, y, sb, o, n); return true;
    case BinaryKind::Mul: binary_row_f32_avx2<BinaryKind::Mul>(x, sa, y, sb, o, n); return true;
    case BinaryKind::Div: binary_row_f32_avx2<BinaryKind::Div>(x, sa, y, sb, o, n); return true;
    case BinaryKind::Max: binary_row_f32_avx2<BinaryKind::Max>(x, sa, y, sb, o, n); return true;
    case BinaryKind::Min: binary_row_f32_avx2<BinaryKind::Min>(x, sa, y, sb, o, n); return true;
    default: return false;
  }
}
#endif

#if RLX_VEC_X86
// An f16 row of the kinds the AVX2 f32 loop covers, in chunks: operands widened to f32 on F16C
// lanes, the f32 loop, the results rounded to f16 once (the scalar f16 path's arithmetic: f32
// math, one rounding). ISNet medium's Relu + residual Add regions over 16 M values: 137 ms
// each with one software conversion per value.
bool binary_span_f16_avx2(BinaryKind k, const void* a, int64_t sa, const void* b, int64_t sb, void* out, int64_t n) {
  if ((sa != 0 && sa != 1) || (sb != 0 && sb != 1) || n < 16 || !vec::has_avx2()) return false;
  switch (k) {
    case BinaryKind::Add: case BinaryKind::Sub: case BinaryKind::Mul: case BinaryKind::Div:
    case BinaryKind::Max: case BinaryKind::Min: break;
    default: return false;
  }
  constexpr int64_t kChunk = 512;
  alignas(32) float x[kChunk], y[kChunk], o[kChunk];
  const auto* pa = static_cast<const f16*>(a);
  const auto* pb = static_cast<const f16*>(b);
  auto* po = static_cast<f16*>(out);
  if (sa == 0) x[0] = load(pa[0]);
  if (sb == 0) y[0] = load(pb[0]);
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t c = std::min(kChunk, n - i);
    if (sa) f16_to_f32(pa + i, x, c);
    if (sb) f16_to_f32(pb + i, y, c);
    if (c < 16) {  // the f32 loop's minimum: pad the tail with ones (results past c are dropped)
      if (sa) std::fill(x + c, x + 16, 1.f);
      if (sb) std::fill(y + c, y + 16, 1.f);
    }
    if (!binary_span_f32_avx2(k, x, sa, y, sb, o, std::max<int64_t>(c, 16))) return false;  // covered kinds
    f32_to_f16(o, po + i, c);
  }
  return true;
}
#endif

void binary_span(BinaryKind k, DType t, const void* a, int64_t sa, const void* b, int64_t sb, void* out, int64_t n) {
  if (needs_zero_check(k, t)) check_divisor(k, t, b, sb, n);
#if RLX_VEC_X86
  if (t == DType::F32 && binary_span_f32_avx2(k, a, sa, b, sb, out, n)) return;
  if (t == DType::F16 && binary_span_f16_avx2(k, a, sa, b, sb, out, n)) return;
#endif
  with_binary_fn(k, t, [&]<DType D>(auto fn) {
    using T = storage_t<D>;
    binary_row(static_cast<const T*>(a), sa, static_cast<const T*>(b), sb, static_cast<T*>(out), n, fn);
  });
}

void compare_span(CompareKind k, DType t, const void* a, int64_t sa, const void* b, int64_t sb, void* out,
                  int64_t n) {
  with_compare_fn(k, t, [&]<DType D>(auto fn) {
    using T = storage_t<D>;
    binary_row(static_cast<const T*>(a), sa, static_cast<const T*>(b), sb, static_cast<uint8_t*>(out), n, fn);
  });
}

void where_span(size_t elem_bytes, const uint8_t* cond, int64_t sc, const void* a, int64_t sa, const void* b,
                int64_t sb, void* out, int64_t n) {
  visit_elem_size(elem_bytes, [&]<class U>() {
    where_row(cond, sc, static_cast<const U*>(a), sa, static_cast<const U*>(b), sb, static_cast<U*>(out), n);
  });
}

void kernel(const ops::Binary& op, KernelContext& ctx) {
  const Tensor& a = ctx.in[0];
  const Tensor& b = ctx.in[1];
  Tensor& out = ctx.out[0];
  if (out.numel() == 0) return;
  if (needs_zero_check(op.kind, b.dtype())) check_divisor(op.kind, b.dtype(), b.raw(), 1, b.numel());
  with_binary_fn(op.kind, a.dtype(), [&]<DType D>(auto fn) {
    using T = storage_t<D>;
    run_binary_like<T, decltype(fn), T>(a, b, out, fn);
  });
}

void kernel(const ops::Compare& op, KernelContext& ctx) {
  const Tensor& a = ctx.in[0];
  const Tensor& b = ctx.in[1];
  with_compare_fn(op.kind, a.dtype(), [&]<DType D>(auto fn) {
    run_binary_like<uint8_t, decltype(fn), storage_t<D>>(a, b, ctx.out[0], fn);
  });
}

void kernel(const ops::Where&, KernelContext& ctx) {
  const Tensor& c = ctx.in[0];
  const Tensor& a = ctx.in[1];
  const Tensor& b = ctx.in[2];
  Tensor& out = ctx.out[0];
  const int64_t n = out.numel();
  if (n == 0) return;
  const auto* pc = static_cast<const uint8_t*>(c.raw());
  visit_elem_size(dtype_size(out.dtype()), [&]<class U>() {
    const auto* pa = static_cast<const U*>(a.raw());
    const auto* pb = static_cast<const U*>(b.raw());
    auto* po = static_cast<U*>(out.raw());
    if (c.numel() == n && a.numel() == n && b.numel() == n) {
      parallel_for(n, kElementwiseGrain,
                   [&](int64_t s, int64_t e) { where_row(pc + s, 1, pa + s, 1, pb + s, 1, po + s, e - s); });
      return;
    }
    const auto plan = make_plan<3>(out.shape(), {&c.shape(), &a.shape(), &b.shape()});
    parallel_rows<3>(plan, [&](const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& st, int64_t pos,
                               int64_t cnt) {
      where_row(pc + off[0], st[0], pa + off[1], st[1], pb + off[2], st[2], po + pos, cnt);
    });
  });
}

}  // namespace rlx::cpu
