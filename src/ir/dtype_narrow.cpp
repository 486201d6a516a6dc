// The storage-only dtypes' conversions (rlx/dtype_narrow.h has the rules).
#include "rlx/dtype_narrow.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace rlx {
namespace {

// A small float format: sign bit above `ebits` exponent and `mbits` mantissa bits.
struct Format {
  int ebits, mbits, bias;
  int max_code;  // the largest finite magnitude's code (sign bit clear)
  enum class Nan { SignedAllOnes, SignedE5M2, Fnuz, F4 } nan;
  bool has_inf;    // e5m2: S.11111.00
  bool neg_zero;   // fnuz formats have none (their 0x80 is the NaN)
  bool always_saturates;
  int width() const { return 1 + ebits + mbits; }
  int sign_bit() const { return 1 << (ebits + mbits); }
};

const Format& format_of(DType t) {
  static const Format e4m3fn{4, 3, 7, 0x7e, Format::Nan::SignedAllOnes, false, true, false};
  static const Format e4m3fnuz{4, 3, 8, 0x7f, Format::Nan::Fnuz, false, false, false};
  static const Format e5m2{5, 2, 15, 0x7b, Format::Nan::SignedE5M2, true, true, false};
  static const Format e5m2fnuz{5, 2, 16, 0x7f, Format::Nan::Fnuz, false, false, false};
  static const Format e2m1{2, 1, 1, 0x7, Format::Nan::F4, false, true, true};
  switch (t) {
    case DType::F8E4M3FN: return e4m3fn;
    case DType::F8E4M3FNUZ: return e4m3fnuz;
    case DType::F8E5M2: return e5m2;
    case DType::F8E5M2FNUZ: return e5m2fnuz;
    case DType::F4E2M1: return e2m1;
    default: break;
  }
  throw Error(std::string("narrow float: ") + dtype_name(t) + " is not a float8/float4 format");
}

int nan_code(const Format& f, bool neg) {
  const int s = neg ? f.sign_bit() : 0;
  switch (f.nan) {
    case Format::Nan::SignedAllOnes: return s | (f.sign_bit() - 1);
    case Format::Nan::SignedE5M2: return s | 0x7e;
    case Format::Nan::Fnuz: return 0x80;
    case Format::Nan::F4: return 0x8;
  }
  return 0x80;
}

// Round half to even of a non-negative double (no dependence on the FP environment).
double round_half_even(double q) {
  const double fl = std::floor(q);
  const double d = q - fl;
  if (d > 0.5 || (d == 0.5 && std::fmod(fl, 2.0) != 0)) return fl + 1;
  return fl;
}

uint8_t encode(const Format& f, double v, bool saturate) {
  const bool neg = std::signbit(v);
  const int sign = neg ? f.sign_bit() : 0;
  if (std::isnan(v)) return static_cast<uint8_t>(nan_code(f, neg));
  const bool sat = saturate || f.always_saturates;
  auto overflow = [&]() -> uint8_t {
    if (sat) return static_cast<uint8_t>(sign | f.max_code);
    if (f.has_inf) return static_cast<uint8_t>(sign | (f.max_code + 1));  // e5m2: S.11111.00
    return static_cast<uint8_t>(nan_code(f, neg));
  };
  const double a = std::fabs(v);
  if (std::isinf(a)) return overflow();
  if (a == 0) return static_cast<uint8_t>(f.neg_zero ? sign : 0);
  int k = 0;
  std::frexp(a, &k);  // a = m * 2^k, m in [0.5, 1)
  int e = k - 1;      // a in [2^e, 2^(e+1))
  const int emin = 1 - f.bias;
  if (e < emin) e = emin;  // subnormal range: the quantum stays 2^(emin - mbits)
  if (e > 1000) return overflow();  // far beyond every format (keeps ldexp finite)
  int64_t r = static_cast<int64_t>(round_half_even(std::ldexp(a, f.mbits - e)));
  if (r == (int64_t{1} << (f.mbits + 1))) r >>= 1, ++e;  // rounded up into the next binade
  if (r == 0) return static_cast<uint8_t>(f.neg_zero ? sign : 0);
  const int64_t implicit = int64_t{1} << f.mbits;
  const int64_t exp_field = r >= implicit ? e + f.bias : 0;
  const int64_t code = (exp_field << f.mbits) | (r & (implicit - 1));
  if (code > f.max_code) return overflow();
  return static_cast<uint8_t>(sign | code);
}

double decode(const Format& f, uint8_t bits) {
  const int b = bits & ((1 << f.width()) - 1);
  const int mag = b & (f.sign_bit() - 1);
  const bool neg = (b & f.sign_bit()) != 0;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  switch (f.nan) {
    case Format::Nan::Fnuz:
      if (b == f.sign_bit()) return nan;
      break;
    case Format::Nan::SignedAllOnes:
      if (mag == f.sign_bit() - 1) return neg ? -nan : nan;
      break;
    case Format::Nan::SignedE5M2:
      if (mag > f.max_code + 1) return neg ? -nan : nan;
      if (mag == f.max_code + 1) return neg ? -INFINITY : INFINITY;
      break;
    case Format::Nan::F4: break;
  }
  const int exp_field = mag >> f.mbits;
  const int mant = mag & ((1 << f.mbits) - 1);
  const double v = exp_field == 0 ? std::ldexp(mant, 1 - f.bias - f.mbits)
                                  : std::ldexp(mant + (1 << f.mbits), exp_field - f.bias - f.mbits);
  return neg ? -v : v;
}

// e8m0 from a power-of-two exponent e of |v| in [2^e, 2^(e+1)), whether |v| > 2^e, and
// whether |v| >= 1.5 * 2^e.
uint8_t e8m0_round(int64_t e, bool above, bool half_or_more, NarrowCast o) {
  if (o.round == E8M0Round::Up && above) ++e;
  if (o.round == E8M0Round::Nearest && half_or_more) ++e;
  if (e > 127) return o.saturate ? 0xFE : 0xFF;
  if (e < -127) return o.saturate ? 0x00 : 0xFF;
  return static_cast<uint8_t>(e + 127);
}

uint8_t e8m0_encode(double v, NarrowCast o) {
  if (std::isnan(v)) return 0xFF;
  const double a = std::fabs(v);
  if (std::isinf(a)) return o.saturate ? 0xFE : 0xFF;
  if (a == 0) return o.saturate ? 0x00 : 0xFF;
  int k = 0;
  const double m = std::frexp(a, &k);  // a = m * 2^k, m in [0.5, 1)
  return e8m0_round(k - 1, m > 0.5, m >= 0.75, o);
}

double e8m0_decode(uint8_t bits) {
  if (bits == 0xFF) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, static_cast<int>(bits) - 127);
}

int64_t clamp_to_i64(double r) {
  if (r != r) return 0;
  if (r >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
  if (r <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(r);
}

template <class T> constexpr bool is_half_v = std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

// One element of a compute dtype D as the bits of storage-only `to`.
template <DType D>
uint8_t to_narrow(typename dtype_storage<D>::type v, DType to, NarrowCast o) {
  using T = typename dtype_storage<D>::type;
  if constexpr (D == DType::Bool) {
    const uint64_t b = v != 0 ? 1 : 0;
    if (is_narrow_int(to)) return narrow_int_wrap(to, b);
    return narrow_float_bits(to, static_cast<double>(b), o);
  } else if constexpr (is_half_v<T> || std::is_floating_point_v<T>) {
    const double x = to_double(v);
    if (is_narrow_int(to)) return narrow_int_from_double(to, x);
    return narrow_float_bits(to, x, o);
  } else {
    static_assert(std::is_integral_v<T>);
    if (is_narrow_int(to)) return narrow_int_wrap(to, static_cast<uint64_t>(v));
    if (to == DType::F8E8M0) {
      if constexpr (std::is_signed_v<T>) {
        const uint64_t mag = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        return e8m0_bits_from_uint(mag, o);
      } else {
        return e8m0_bits_from_uint(static_cast<uint64_t>(v), o);
      }
    }
    // Every f8/f4 format overflows long before an integer stops being exact in a double.
    return narrow_float_bits(to, static_cast<double>(v), o);
  }
}

// A storage-only value (as double: exact, or as int64 for the integers) into compute dtype D.
template <DType D>
typename dtype_storage<D>::type from_narrow_float(double x) {
  using T = typename dtype_storage<D>::type;
  if constexpr (D == DType::Bool) {
    return x != 0 ? 1 : 0;  // NaN != 0
  } else if constexpr (is_half_v<T>) {
    return T(static_cast<float>(x));  // exact in f32, one rounding to f16/bf16
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(x);
  } else {  // truncate toward zero and saturate; NaN -> 0 (the Cast kernel's float -> int rule)
    if (x != x) return 0;
    const double t = std::trunc(x);
    if (t <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (t >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(t);
  }
}

template <DType D>
typename dtype_storage<D>::type from_narrow_int(int64_t x) {
  using T = typename dtype_storage<D>::type;
  if constexpr (D == DType::Bool) return x != 0 ? 1 : 0;
  else if constexpr (is_half_v<T>) return T(static_cast<float>(x));  // |x| <= 15: exact
  else return static_cast<T>(x);  // integers: modular (i4 -1 -> u8 255), like int -> int casts
}

}  // namespace

double narrow_float_value(DType t, uint8_t bits) {
  if (t == DType::F8E8M0) return e8m0_decode(bits);
  return decode(format_of(t), bits);
}

uint8_t narrow_float_bits(DType t, double v, NarrowCast o) {
  if (t == DType::F8E8M0) return e8m0_encode(v, o);
  return encode(format_of(t), v, o.saturate);
}

uint8_t e8m0_bits_from_uint(uint64_t mag, NarrowCast o) {
  if (mag == 0) return o.saturate ? 0x00 : 0xFF;
  const int e = 63 - std::countl_zero(mag);
  const uint64_t below = e == 0 ? 0 : mag & ((uint64_t{1} << e) - 1);
  const bool half_or_more = e > 0 && ((mag >> (e - 1)) & 1) != 0;
  return e8m0_round(e, below != 0, half_or_more, o);
}

uint8_t narrow_int_wrap(DType t, uint64_t v) {
  switch (t) {
    case DType::I4: return static_cast<uint8_t>(static_cast<int8_t>(((v & 0xF) ^ 0x8) - 0x8));
    case DType::U4: return static_cast<uint8_t>(v & 0xF);
    case DType::I2: return static_cast<uint8_t>(static_cast<int8_t>(((v & 0x3) ^ 0x2) - 0x2));
    case DType::U2: return static_cast<uint8_t>(v & 0x3);
    default: break;
  }
  throw Error(std::string("narrow int: ") + dtype_name(t) + " is not a sub-byte integer dtype");
}

uint8_t narrow_int_from_double(DType t, double v) {
  if (v != v) return 0;
  const double r = std::isinf(v) ? v : (v < 0 ? -round_half_even(-v) : round_half_even(v));
  return narrow_int_wrap(t, static_cast<uint64_t>(clamp_to_i64(r)));
}

int64_t narrow_int_value(DType t, uint8_t stored) {
  switch (t) {
    case DType::I4: return static_cast<int64_t>(((stored & 0xF) ^ 0x8)) - 0x8;
    case DType::U4: return stored & 0xF;
    case DType::I2: return static_cast<int64_t>(((stored & 0x3) ^ 0x2)) - 0x2;
    case DType::U2: return stored & 0x3;
    default: break;
  }
  throw Error(std::string("narrow int: ") + dtype_name(t) + " is not a sub-byte integer dtype");
}

void cast_narrow(DType from, DType to, const void* in, void* out, int64_t n, NarrowCast o) {
  if (!is_storage_only(from) && !is_storage_only(to))
    throw Error(std::string("cast_narrow: neither ") + dtype_name(from) + " nor " + dtype_name(to) +
                " is a storage-only dtype");
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (from == to) {  // every code converts to itself
    if (n > 0) std::memcpy(out, in, static_cast<size_t>(n));
    return;
  }
  if (is_storage_only(from) && is_storage_only(to)) {
    for (int64_t i = 0; i < n; ++i) {
      if (is_narrow_int(from)) {
        const int64_t x = narrow_int_value(from, src[i]);
        dst[i] = is_narrow_int(to) ? narrow_int_wrap(to, static_cast<uint64_t>(x))
                 : to == DType::F8E8M0
                     ? e8m0_bits_from_uint(static_cast<uint64_t>(x < 0 ? -x : x), o)
                     : narrow_float_bits(to, static_cast<double>(x), o);
      } else {
        const double x = narrow_float_value(from, src[i]);
        dst[i] = is_narrow_int(to) ? narrow_int_from_double(to, x) : narrow_float_bits(to, x, o);
      }
    }
    return;
  }
  if (is_storage_only(to)) {
    visit_dtype(from, [&]<DType D>() {
      const auto* x = static_cast<const typename dtype_storage<D>::type*>(in);
      for (int64_t i = 0; i < n; ++i) dst[i] = to_narrow<D>(x[i], to, o);
    });
    return;
  }
  visit_dtype(to, [&]<DType D>() {
    auto* y = static_cast<typename dtype_storage<D>::type*>(out);
    if (is_narrow_int(from)) {
      for (int64_t i = 0; i < n; ++i) y[i] = from_narrow_int<D>(narrow_int_value(from, src[i]));
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = from_narrow_float<D>(narrow_float_value(from, src[i]));
    }
  });
}

}  // namespace rlx
