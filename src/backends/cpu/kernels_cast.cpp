// CPU kernel for Cast: converts values (not bits) between every pair of dtypes. Casts to or from
// a storage-only dtype (float8, float4, int4/uint4, int2/uint2) follow rlx/dtype_narrow.h
// (ONNX's rules: saturate / round_mode attributes, round to nearest even, wrapping sub-byte
// integers); the rules below are those between the compute dtypes.
//
// Conversion rules:
//  - x -> bool is (x != 0); NaN is nonzero, so NaN -> true. bool -> x gives 0 or 1.
//  - float -> int truncates toward zero and SATURATES: NaN -> 0, values (and +-inf) beyond
//    the target's range clamp to its min/max; so a negative float cast to an unsigned dtype
//    gives 0. (Defined for every input; matches Tensor::cast.)
//  - int -> int is the modular (two's complement) conversion, like C++20 / numpy astype:
//    i32 -1 -> u8 255.
//  - -> f32/f64 is a single round-to-nearest-even step. f32 <-> f16 runs in bulk (vec_rows.h:
//    F16C where the CPU has it, same bits; a signaling NaN comes out quiet).
//  - -> f16/bf16 is a single round-to-nearest-even step from the exact source value: sources
//    wider than f32 in precision (f64, and integers beyond 2^24) are first narrowed to f32
//    with round-to-odd, which makes the final f16/bf16 rounding exact (no double rounding).
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "backends/cpu/elementwise_core.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_math.h"
#include "backends/cpu/vec_rows.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rlx::cpu {
namespace {

// f64 -> f32 rounded to odd (truncate, then set the last mantissa bit when inexact). Values
// beyond the f32 range become +-inf (they are beyond every f16/bf16 rounding boundary too).
float f64_to_f32_odd(double d) {
  if (!(std::fabs(d) <= static_cast<double>(std::numeric_limits<float>::max())))
    return static_cast<float>(d);  // NaN, +-inf, or out of range -> +-inf
  float f = static_cast<float>(d);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // truncate toward 0
  if (static_cast<double>(f) != d) f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
  return f;
}

// Integer -> f32 rounded to odd (exact below 2^24).
template <class T>
float int_to_f32_odd(T v) {
  const bool neg = std::is_signed_v<T> && v < 0;
  const uint64_t mag = neg ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  if (mag < (uint64_t{1} << 24)) return neg ? -static_cast<float>(mag) : static_cast<float>(mag);
  const int shift = (64 - std::countl_zero(mag)) - 24;
  uint64_t m = mag >> shift;
  if (mag & ((uint64_t{1} << shift) - 1)) m |= 1;
  const float f = std::ldexp(static_cast<float>(m), shift);
  return neg ? -f : f;
}

template <DType S, DType D>
inline storage_t<D> convert(storage_t<S> v) {
  using Src = storage_t<S>;
  using Dst = storage_t<D>;
  if constexpr (S == D) {
    return v;
  } else if constexpr (D == DType::Bool) {
    if constexpr (is_float_dtype(S)) return load(v) != 0 ? 1 : 0;
    else return v != 0 ? 1 : 0;
  } else if constexpr (S == DType::Bool) {
    if constexpr (D == DType::F16 || D == DType::BF16) return Dst(v ? 1.0f : 0.0f);
    else return static_cast<Dst>(v ? 1 : 0);
  } else if constexpr (D == DType::F32 || D == DType::F64) {
    return static_cast<Dst>(load(v));
  } else if constexpr (D == DType::F16 || D == DType::BF16) {
    if constexpr (S == DType::F64) return Dst(f64_to_f32_odd(v));
    else if constexpr (is_float_dtype(S)) return Dst(static_cast<float>(v));
    else return Dst(int_to_f32_odd(v));
  } else if constexpr (is_float_dtype(S)) {  // float -> int: truncate + saturate, NaN -> 0
    const double x = static_cast<double>(load(v));
    if (x != x) return 0;
    const double t = std::trunc(x);
    if (t <= static_cast<double>(std::numeric_limits<Dst>::lowest())) return std::numeric_limits<Dst>::lowest();
    if (t >= static_cast<double>(std::numeric_limits<Dst>::max())) return std::numeric_limits<Dst>::max();
    return static_cast<Dst>(t);
  } else {  // int -> int: modular
    static_assert(std::is_integral_v<Src> && std::is_integral_v<Dst>);
    return static_cast<Dst>(v);
  }
}

#if defined(__GNUC__) && defined(__x86_64__)
#define RLX_CAST_X86 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
// f32 -> u8 / i8 on AVX2, the scalar rule's bits: NaN -> 0, clamped to the target's range, then
// truncated (clamping first gives the same result: the bounds are integers). The quantize steps
// of QDQ models (ISNet small: 16 M values a cast, 4 ns each on the scalar path).
template <bool Signed>
void f32_to_int8_avx2(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint8_t*>(out);
  const __m256 lo = _mm256_set1_ps(Signed ? -128.f : 0.f), hi = _mm256_set1_ps(Signed ? 127.f : 255.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> +0
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m256i q = _mm256_cvttps_epi32(v);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), Signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w));
  }
  for (; i < n; ++i) {
    if constexpr (Signed) reinterpret_cast<int8_t*>(y)[i] = convert<DType::F32, DType::I8>(x[i]);
    else y[i] = convert<DType::F32, DType::U8>(x[i]);
  }
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#else
#define RLX_CAST_X86 0
#endif

}  // namespace

void cast_span(DType from, DType to, const void* in, void* out, int64_t n, NarrowCast narrow) {
  if (is_storage_only(from) || is_storage_only(to)) return cast_narrow(from, to, in, out, n, narrow);
  // f32 <-> f16 in bulk (F16C where the CPU has it; the same bits as the scalar conversion).
  if (from == DType::F32 && to == DType::F16)
    return f32_to_f16(static_cast<const float*>(in), static_cast<f16*>(out), n);
  if (from == DType::F16 && to == DType::F32)
    return f16_to_f32(static_cast<const f16*>(in), static_cast<float*>(out), n);
#if RLX_CAST_X86
  if (from == DType::F32 && (to == DType::U8 || to == DType::I8) && vec::has_avx2())
    return to == DType::U8 ? f32_to_int8_avx2<false>(static_cast<const float*>(in), out, n)
                           : f32_to_int8_avx2<true>(static_cast<const float*>(in), out, n);
#endif
  visit_dtype(from, [&]<DType S>() {
    visit_dtype(to, [&]<DType D>() {
      const auto* x = static_cast<const storage_t<S>*>(in);
      auto* y = static_cast<storage_t<D>*>(out);
      if constexpr (S == D) {
        if (n > 0) std::memcpy(y, x, static_cast<size_t>(n) * sizeof(storage_t<S>));
      } else {
        for (int64_t i = 0; i < n; ++i) y[i] = convert<S, D>(x[i]);
      }
    });
  });
}

void kernel(const ops::Cast& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  Tensor& y = ctx.out[0];
  const int64_t n = y.numel();
  const size_t si = dtype_size(x.dtype()), so = dtype_size(op.to);
  const auto* pin = static_cast<const uint8_t*>(x.raw());
  auto* pout = static_cast<uint8_t*>(y.raw());
  parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    cast_span(x.dtype(), op.to, pin + static_cast<size_t>(b) * si, pout + static_cast<size_t>(b) * so, e - b,
              op.narrow());
  });
}

}  // namespace rlx::cpu
