// Cast to and from the storage-only dtypes (float8 e4m3fn / e4m3fnuz / e5m2 / e5m2fnuz / e8m0,
// float4 e2m1, int4 / uint4 / int2 / uint2) against references written here from the format
// definitions: every code decoded, every code encoded back, round-to-nearest-even ties between
// every pair of neighbouring codes (and just off them), saturation at and beyond the largest
// finite value with saturate on and off, NaN / inf / -0, e8m0's three round modes, the sub-byte
// integers' wrapping, and Cast between every dtype pair that involves one of them (the CPU
// kernel, Tensor::cast and the conversion functions agree).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "rlx/dtype_narrow.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using testing::run_op;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- the float formats, from their definitions ---------------------------------------------
struct RefFmt {
  DType t;
  int e, m, bias;
};
const RefFmt kFloat8[] = {{DType::F8E4M3FN, 4, 3, 7},
                          {DType::F8E4M3FNUZ, 4, 3, 8},
                          {DType::F8E5M2, 5, 2, 15},
                          {DType::F8E5M2FNUZ, 5, 2, 16},
                          {DType::F4E2M1, 2, 1, 1}};

bool fnuz(DType t) { return t == DType::F8E4M3FNUZ || t == DType::F8E5M2FNUZ; }
int codes(const RefFmt& f) { return 1 << (1 + f.e + f.m); }
int sign_bit(const RefFmt& f) { return 1 << (f.e + f.m); }

// The value of code c: (-1)^s * 2^(E - bias) * 1.M, subnormal 2^(1 - bias) * 0.M; e4m3fn's
// S.1111.111 and e5m2's S.11111.xx are NaN (xx = 00: inf); fnuz's 1.0000.000 is the NaN.
double ref_value(const RefFmt& f, int c) {
  const bool neg = (c & sign_bit(f)) != 0;
  const int ex = (c >> f.m) & ((1 << f.e) - 1), man = c & ((1 << f.m) - 1);
  if (fnuz(f.t) && c == sign_bit(f)) return kNaN;
  if (f.t == DType::F8E4M3FN && ex == 15 && man == 7) return neg ? -kNaN : kNaN;
  if (f.t == DType::F8E5M2 && ex == 31) return man == 0 ? (neg ? -INFINITY : INFINITY) : (neg ? -kNaN : kNaN);
  const double frac = static_cast<double>(man) / (1 << f.m);
  const double v = ex == 0 ? std::ldexp(frac, 1 - f.bias) : std::ldexp(1 + frac, ex - f.bias);
  return neg ? -v : v;
}

// Largest finite code (sign clear) and its value.
int max_code(const RefFmt& f) {
  int best = 0;
  for (int c = 0; c < sign_bit(f); ++c)
    if (std::isfinite(ref_value(f, c))) best = c;
  return best;
}

int nan_code(const RefFmt& f, bool neg) {
  switch (f.t) {
    case DType::F8E4M3FN: return neg ? 0xff : 0x7f;
    case DType::F8E5M2: return neg ? 0xfe : 0x7e;
    case DType::F4E2M1: return 0x8;  // no NaN: the ONNX reference gives 0x8
    default: return 0x80;
  }
}

// Nearest code by brute force (ties to the even code), with ONNX Cast's overflow rules: the
// value one step above max on the unbounded grid decides whether x rounds beyond max.
int ref_encode(const RefFmt& f, double x, bool saturate) {
  const bool neg = std::signbit(x);
  if (std::isnan(x)) return nan_code(f, neg);
  const bool sat = saturate || f.t == DType::F4E2M1;
  const int sb = neg ? sign_bit(f) : 0;
  const int mc = max_code(f);
  const double maxv = ref_value(f, mc);
  int ex = 0;
  std::frexp(maxv, &ex);
  const double over = maxv + std::ldexp(1.0, ex - 1 - f.m);
  const bool over_even = ((mc & ((1 << f.m) - 1)) + 1) % 2 == 0;  // all-ones mantissa: carries to even
  auto overflow = [&] {
    if (sat) return sb | mc;
    if (f.t == DType::F8E5M2) return sb | 0x7c;
    return nan_code(f, neg);
  };
  const double a = std::fabs(x);
  if (std::isinf(a) || a > over) return overflow();
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c <= mc; ++c) {
    const double d = std::fabs(ref_value(f, c) - a);
    if (d < best_d || (d == best_d && c % 2 == 0)) best = c, best_d = d;
  }
  const double od = std::fabs(over - a);
  if (od < best_d || (od == best_d && over_even)) return overflow();
  if (best == 0) return fnuz(f.t) ? 0 : sb;
  return sb | best;
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(NarrowFloat, KnownValues) {
  EXPECT_EQ(narrow_float_value(DType::F8E4M3FN, 0x7e), 448);
  EXPECT_EQ(narrow_float_value(DType::F8E4M3FN, 0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(narrow_float_value(DType::F8E4M3FNUZ, 0x7f), 240);
  EXPECT_EQ(narrow_float_value(DType::F8E4M3FNUZ, 0x01), std::ldexp(1.0, -10));
  EXPECT_EQ(narrow_float_value(DType::F8E5M2, 0x7b), 57344);
  EXPECT_EQ(narrow_float_value(DType::F8E5M2, 0x7c), INFINITY);
  EXPECT_EQ(narrow_float_value(DType::F8E5M2FNUZ, 0x7f), 57344);
  EXPECT_EQ(narrow_float_value(DType::F8E5M2FNUZ, 0x01), std::ldexp(1.0, -17));
  const double f4[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(narrow_float_value(DType::F4E2M1, static_cast<uint8_t>(c)), f4[c]);
    EXPECT_EQ(narrow_float_value(DType::F4E2M1, static_cast<uint8_t>(c | 8)), -f4[c]);
  }
  EXPECT_TRUE(std::isnan(narrow_float_value(DType::F8E4M3FNUZ, 0x80)));
  EXPECT_TRUE(std::isnan(narrow_float_value(DType::F8E4M3FN, 0xff)));
}

TEST(NarrowFloat, EveryCodeDecodesAndEncodesBack) {
  for (const RefFmt& f : kFloat8) {
    SCOPED_TRACE(dtype_name(f.t));
    for (int c = 0; c < codes(f); ++c) {
      const double v = ref_value(f, c);
      ASSERT_TRUE(same_value(narrow_float_value(f.t, static_cast<uint8_t>(c)), v)) << "code " << c;
      for (bool sat : {true, false}) {
        const int got = narrow_float_bits(f.t, v, {sat, E8M0Round::Up});
        EXPECT_EQ(got, ref_encode(f, v, sat)) << "code " << c << " value " << v << " saturate " << sat;
        if (std::isfinite(v)) {
          EXPECT_EQ(got, c) << "code " << c << " value " << v;  // finite codes are fixed points
        }
      }
    }
  }
}

// Every midpoint between neighbouring codes (a tie), and values just off it; the region past
// the largest finite value; special values; random values over the whole exponent range.
std::vector<double> probe_values(const RefFmt& f) {
  std::vector<double> v = {0.0, -0.0, kNaN, -kNaN, INFINITY, -INFINITY, 1e30, -1e30, 1e-30, -1e-30, 1e-300};
  const int mc = max_code(f);
  for (int c = 0; c <= mc; ++c) {
    const double a = ref_value(f, c);
    const double b = c < mc ? ref_value(f, c + 1) : a + (a - ref_value(f, c - 1));
    const double mid = (a + b) / 2;
    for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, INFINITY), a, b * 1.0001, b * 4})
      v.push_back(x), v.push_back(-x);
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exp_d(-24, 20), man_d(1, 2);
  for (int i = 0; i < 4000; ++i) {
    const double x = std::ldexp(man_d(rng), static_cast<int>(exp_d(rng)));
    v.push_back(i % 2 ? -x : x);
    v.push_back(static_cast<double>(static_cast<float>(x)));
  }
  return v;
}

TEST(NarrowFloat, RoundsTiesToEvenAndSaturates) {
  for (const RefFmt& f : kFloat8) {
    SCOPED_TRACE(dtype_name(f.t));
    for (double x : probe_values(f))
      for (bool sat : {true, false})
        ASSERT_EQ(narrow_float_bits(f.t, x, {sat, E8M0Round::Up}), ref_encode(f, x, sat))
            << "x " << x << " saturate " << sat;
  }
}

TEST(NarrowFloat, SpecTables) {
  // ONNX Cast: inf -> max with saturate; NaN (e4m3fn, e4m3fnuz, e5m2fnuz) or inf (e5m2) without.
  EXPECT_EQ(narrow_float_bits(DType::F8E4M3FN, INFINITY, {true}), 0x7e);
  EXPECT_EQ(narrow_float_bits(DType::F8E4M3FN, -INFINITY, {false}), 0xff);
  EXPECT_EQ(narrow_float_bits(DType::F8E4M3FN, 464, {true}), 0x7e);  // tie: down to 448 (even)
  EXPECT_EQ(narrow_float_bits(DType::F8E4M3FN, 464, {false}), 0x7e);
  EXPECT_EQ(narrow_float_bits(DType::F8E4M3FN, 465, {false}), 0x7f);  // rounds to 480: beyond max
  EXPECT_EQ(narrow_float_bits(DType::F8E4M3FNUZ, INFINITY, {false}), 0x80);
  EXPECT_EQ(narrow_float_bits(DType::F8E4M3FNUZ, -0.0, {true}), 0x00);  // no -0
  EXPECT_EQ(narrow_float_bits(DType::F8E4M3FNUZ, -1e-7, {true}), 0x00);
  EXPECT_EQ(narrow_float_bits(DType::F8E4M3FN, -1e-7, {true}), 0x80);
  EXPECT_EQ(narrow_float_bits(DType::F8E5M2, 61440, {false}), 0x7c);  // tie: up to 65536 = inf
  EXPECT_EQ(narrow_float_bits(DType::F8E5M2, 61439, {false}), 0x7b);
  EXPECT_EQ(narrow_float_bits(DType::F8E5M2, 1e6, {true}), 0x7b);
  EXPECT_EQ(narrow_float_bits(DType::F8E5M2, kNaN, {true}), 0x7e);
  EXPECT_EQ(narrow_float_bits(DType::F8E5M2FNUZ, -INFINITY, {true}), 0xff);
  EXPECT_EQ(narrow_float_bits(DType::F4E2M1, 7, {false}), 0x7);  // float4 always saturates
  EXPECT_EQ(narrow_float_bits(DType::F4E2M1, -3.5, {true}), 0xe);  // tie 3 / 4 -> 4 (even)
  EXPECT_EQ(narrow_float_bits(DType::F4E2M1, 0.25, {true}), 0x0);  // tie 0 / 0.5 -> 0
  EXPECT_EQ(narrow_float_bits(DType::F4E2M1, kNaN, {true}), 0x8);
}

// ---- e8m0 --------------------------------------------------------------------------------
TEST(NarrowFloat, E8M0) {
  for (int c = 0; c < 255; ++c) {
    const double v = std::ldexp(1.0, c - 127);
    ASSERT_EQ(narrow_float_value(DType::F8E8M0, static_cast<uint8_t>(c)), v);
    for (E8M0Round r : {E8M0Round::Up, E8M0Round::Down, E8M0Round::Nearest})
      for (bool sat : {true, false}) ASSERT_EQ(narrow_float_bits(DType::F8E8M0, v, {sat, r}), c);
  }
  EXPECT_TRUE(std::isnan(narrow_float_value(DType::F8E8M0, 0xff)));
  struct Case {
    double x;
    int up, down, nearest;
  };
  // between 2^k and 2^(k+1): up takes 2^(k+1), down 2^k, nearest the nearer (1.5 * 2^k ties up)
  for (const Case& c : {Case{1.25, 128, 127, 127}, Case{1.5, 128, 127, 128}, Case{1.75, 128, 127, 128},
                        Case{std::nextafter(1.5, 0.0), 128, 127, 127}, Case{-3.0, 129, 128, 129},
                        Case{0.3, 126, 125, 125}, Case{std::ldexp(1.5, -127), 1, 0, 1}}) {
    EXPECT_EQ(narrow_float_bits(DType::F8E8M0, c.x, {true, E8M0Round::Up}), c.up) << c.x;
    EXPECT_EQ(narrow_float_bits(DType::F8E8M0, c.x, {true, E8M0Round::Down}), c.down) << c.x;
    EXPECT_EQ(narrow_float_bits(DType::F8E8M0, c.x, {true, E8M0Round::Nearest}), c.nearest) << c.x;
  }
  // saturate: [2^-127, 2^127]; without, beyond (and 0, inf) is NaN
  for (double x : {std::ldexp(1.0, 128), std::ldexp(1.5, 127), static_cast<double>(INFINITY), 1e300}) {
    EXPECT_EQ(narrow_float_bits(DType::F8E8M0, x, {true}), 0xfe) << x;
    EXPECT_EQ(narrow_float_bits(DType::F8E8M0, x, {false}), 0xff) << x;
  }
  EXPECT_EQ(narrow_float_bits(DType::F8E8M0, std::ldexp(1.5, 127), {true, E8M0Round::Down}), 0xfe);
  for (double x : {0.0, std::ldexp(1.0, -128), 1e-300}) {
    EXPECT_EQ(narrow_float_bits(DType::F8E8M0, x, {true, E8M0Round::Down}), 0x00) << x;
    EXPECT_EQ(narrow_float_bits(DType::F8E8M0, x, {false, E8M0Round::Down}), 0xff) << x;
  }
  EXPECT_EQ(narrow_float_bits(DType::F8E8M0, std::ldexp(1.0, -128), {false, E8M0Round::Up}), 0xff);
  EXPECT_EQ(narrow_float_bits(DType::F8E8M0, std::ldexp(1.25, -128), {false, E8M0Round::Up}), 0x00);
  EXPECT_EQ(narrow_float_bits(DType::F8E8M0, kNaN, {true}), 0xff);
  // integers exactly (2^60 + 1 is not a double): up -> 2^61
  EXPECT_EQ(e8m0_bits_from_uint((uint64_t{1} << 60) + 1, {true, E8M0Round::Up}), 127 + 61);
  EXPECT_EQ(e8m0_bits_from_uint(uint64_t{3} << 59, {true, E8M0Round::Nearest}), 127 + 61);
  EXPECT_EQ(e8m0_bits_from_uint((uint64_t{3} << 59) - 1, {true, E8M0Round::Nearest}), 127 + 60);
  const Tensor big = Tensor::i64({1}, std::vector<int64_t>{(int64_t{1} << 60) + 1});
  EXPECT_EQ(static_cast<const uint8_t*>(run_op(ops::Cast{DType::F8E8M0}, {big}).raw())[0], 127 + 61);
}

// ---- sub-byte integers ---------------------------------------------------------------------
struct RefInt {
  DType t;
  int bits;
  bool is_signed;
};
const RefInt kSubByte[] = {{DType::I4, 4, true}, {DType::U4, 4, false}, {DType::I2, 2, true}, {DType::U2, 2, false}};

int64_t ref_wrap(const RefInt& f, int64_t v) {
  const int64_t m = int64_t{1} << f.bits;
  int64_t r = ((v % m) + m) % m;
  if (f.is_signed && r >= m / 2) r -= m;
  return r;
}

TEST(NarrowInt, WrapsAndRoundsLikeTheSpec) {
  for (const RefInt& f : kSubByte) {
    SCOPED_TRACE(dtype_name(f.t));
    for (int64_t v = -70; v <= 70; ++v) {
      const uint8_t b = narrow_int_wrap(f.t, static_cast<uint64_t>(v));
      ASSERT_EQ(narrow_int_value(f.t, b), ref_wrap(f, v)) << v;
      ASSERT_EQ(narrow_int_value(f.t, narrow_int_from_double(f.t, static_cast<double>(v))), ref_wrap(f, v)) << v;
    }
    // floats round half to even first, then wrap
    for (double x : {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 7.6, -8.6, 1e3 + 0.5})
      EXPECT_EQ(narrow_int_value(f.t, narrow_int_from_double(f.t, x)), ref_wrap(f, static_cast<int64_t>(std::nearbyint(x))))
          << x;
    EXPECT_EQ(narrow_int_value(f.t, narrow_int_from_double(f.t, kNaN)), 0);
    for (int c = 0; c < (1 << f.bits); ++c) {  // every stored value (sign-extended for i4/i2)
      const int64_t v = ref_wrap(f, c);
      EXPECT_EQ(narrow_int_value(f.t, narrow_int_wrap(f.t, static_cast<uint64_t>(c))), v);
    }
  }
  // ONNX's test_cast_FLOAT_to_INT4 data: -9 .. 15 -> 7, -8, -7, ..., 7, -8, ..., -1
  for (int v = -9; v <= 15; ++v)
    EXPECT_EQ(narrow_int_value(DType::I4, narrow_int_from_double(DType::I4, v)), ((v + 8) % 16 + 16) % 16 - 8);
}

// ---- Cast between every pair involving a storage-only dtype ----------------------------------
// One value, by the rules of rlx/dtype_narrow.h, computed from the test's references.
struct Val {
  bool is_int = false;  // the exact source value is `i` (else `d`)
  int64_t i = 0;
  double d = 0;
};

std::vector<uint8_t> sample_codes(DType t) {
  std::vector<uint8_t> c;
  const int n = is_narrow_int(t) ? (t == DType::I4 || t == DType::U4 ? 16 : 4) : (t == DType::F4E2M1 ? 16 : 256);
  for (int k = 0; k < n; ++k) {
    if (t == DType::I4 || t == DType::I2) c.push_back(static_cast<uint8_t>(static_cast<int8_t>(ref_wrap({t, t == DType::I4 ? 4 : 2, true}, k))));
    else c.push_back(static_cast<uint8_t>(k));
  }
  return c;
}

Val source_value(DType t, uint8_t b) {
  Val v;
  if (is_narrow_int(t)) {
    v.is_int = true;
    const int bits = t == DType::I4 || t == DType::U4 ? 4 : 2;
    v.i = ref_wrap({t, bits, t == DType::I4 || t == DType::I2}, b);
  } else if (t == DType::F8E8M0) {
    v.d = b == 0xff ? kNaN : std::ldexp(1.0, b - 127);
  } else {
    for (const RefFmt& f : kFloat8)
      if (f.t == t) v.d = ref_value(f, b);
  }
  return v;
}

uint8_t ref_to_narrow(DType to, const Val& v, NarrowCast o) {
  if (is_narrow_int(to)) {
    const RefInt* f = nullptr;
    for (const RefInt& r : kSubByte)
      if (r.t == to) f = &r;
    int64_t x = v.i;
    if (!v.is_int) {  // round half to even, NaN -> 0, beyond int64 clamped
      if (std::isnan(v.d)) x = 0;
      else if (std::fabs(v.d) >= 9223372036854775808.0)
        x = v.d > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
      else x = static_cast<int64_t>(std::nearbyint(v.d));
    }
    return static_cast<uint8_t>(static_cast<int8_t>(ref_wrap(*f, x)));
  }
  const double x = v.is_int ? static_cast<double>(v.i) : v.d;
  if (to == DType::F8E8M0) {  // exact powers of two or values from the formats: checked above
    return narrow_float_bits(to, x, o);
  }
  for (const RefFmt& f : kFloat8)
    if (f.t == to) return static_cast<uint8_t>(ref_encode(f, x, o.saturate));
  return 0;
}

TEST(NarrowCastOp, EveryPairOnTheCpu) {
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      if (!is_storage_only(from) && !is_storage_only(to)) continue;
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      // sources: every code of a storage-only dtype; else values covering the targets' ranges
      Tensor src;
      std::vector<Val> vals;
      if (is_storage_only(from)) {
        const auto c = sample_codes(from);
        src = Tensor::from_bytes(from, {static_cast<int64_t>(c.size())}, c.data(), c.size());
        for (uint8_t b : c) vals.push_back(source_value(from, b));
      } else {
        std::vector<double> d = {0, 1, -1, 2, 3, 5, 6, 7, 8, 9, 15, 16, 17, -7, -8, -9, 100, 255, 448, 449, 500, 57344, 60000};
        if (is_float(from))
          for (double x : {0.5, 1.5, 2.5, -2.5, 3.25, 0.0625, -0.0, 1e-3, 1e9, kNaN, double(INFINITY), -double(INFINITY)})
            d.push_back(x);
        if (from == DType::Bool) d = {0, 1};
        const bool unsigned_src = from == DType::U8 || from == DType::U16 || from == DType::U32 || from == DType::U64;
        std::vector<double> kept;
        for (double x : d) {
          if (unsigned_src && x < 0) continue;
          if ((from == DType::I8 || from == DType::U8) && std::fabs(x) > 127) continue;
          if (from == DType::I16 && std::fabs(x) > 32767) continue;
          kept.push_back(x);
        }
        src = testing::from_doubles(DType::F64, {static_cast<int64_t>(kept.size())}, kept).cast(from);
        for (double x : src.to_f64()) {
          Val v;
          v.is_int = !is_float(from);
          v.i = static_cast<int64_t>(x);
          v.d = x;
          vals.push_back(v);
        }
      }
      for (bool sat : {true, false}) {
        ops::Cast op;
        op.to = to;
        op.saturate = sat;
        const Tensor out = run_op(op, {src});
        ASSERT_EQ(out.dtype(), to);
        const Tensor via_tensor = src.cast(to);  // Tensor::cast: the same rules (saturating)
        const auto* ob = static_cast<const uint8_t*>(out.raw());
        const std::vector<double> od = is_storage_only(to) ? std::vector<double>{} : out.to_f64();
        for (size_t i = 0; i < vals.size(); ++i) {
          const Val& v = vals[i];
          if (is_storage_only(to)) {
            // a cast to the same dtype is the identity (as the ONNX importer and the optimizer make it)
            const uint8_t want = from == to ? static_cast<const uint8_t*>(src.raw())[i]
                                            : ref_to_narrow(to, v, {sat, E8M0Round::Up});
            const bool both_nan = is_narrow_float(to) && std::isnan(narrow_float_value(to, ob[i])) &&
                                  std::isnan(narrow_float_value(to, want));
            ASSERT_TRUE(ob[i] == want || both_nan)
                << "element " << i << " (" << (v.is_int ? static_cast<double>(v.i) : v.d) << "): got 0x" << std::hex
                << int(ob[i]) << " want 0x" << int(want);
            if (sat) {
              ASSERT_EQ(static_cast<const uint8_t*>(via_tensor.raw())[i], ob[i]);
            }
          } else {
            // a storage-only source into a compute dtype: its exact value, converted like any
            // f64 (or integer) source (floats: one rounding; integers: truncate + saturate)
            // (integers into integers wrap: i4 -1 -> u8 255)
            const Tensor one = v.is_int ? Tensor::i64({1}, std::vector<int64_t>{v.i}) : testing::from_doubles(DType::F64, {1}, {v.d});
            const double want = one.cast(to).to_f64()[0];
            ASSERT_TRUE(same_value(od[i], want) || (to == DType::Bool && od[i] == want))
                << "element " << i << " source " << (v.is_int ? static_cast<double>(v.i) : v.d) << ": got " << od[i]
                << " want " << want;
            ASSERT_TRUE(same_value(via_tensor.to_f64()[i], od[i]));
          }
        }
      }
    }
  }
}

TEST(NarrowCastOp, FromF16AndToIntegers) {
  // f16 inputs convert from their exact value (no double rounding through f32)
  const Tensor h = testing::from_doubles(DType::F16, {4}, {464, 465, -0.0, 65504});
  const Tensor y = run_op(ops::Cast{DType::F8E4M3FN}, {h});
  const auto* b = static_cast<const uint8_t*>(y.raw());
  EXPECT_EQ(b[0], 0x7e);
  EXPECT_EQ(b[1], 0x7e);  // saturate: 480 -> 448
  EXPECT_EQ(b[2], 0x80);
  EXPECT_EQ(b[3], 0x7e);
  // float8 -> integers truncates and saturates; NaN -> 0
  const uint8_t codes8[] = {0x7e, 0xfe, 0x7f, 0x3c, 0xbc};  // 448, -448, NaN, 1.5, -1.5
  const Tensor f8 = Tensor::from_bytes(DType::F8E4M3FN, {5}, codes8, 5);
  EXPECT_EQ(run_op(ops::Cast{DType::I8}, {f8}).to_i64(), (std::vector<int64_t>{127, -128, 0, 1, -1}));
  EXPECT_EQ(run_op(ops::Cast{DType::U8}, {f8}).to_i64(), (std::vector<int64_t>{255, 0, 0, 1, 0}));
  EXPECT_EQ(run_op(ops::Cast{DType::Bool}, {f8}).to_i64(), (std::vector<int64_t>{1, 1, 1, 1, 1}));
}

TEST(NarrowCastOp, AttributesAreValidatedAndPrinted) {
  Graph g;
  Value x = g.input("x", Shape({2}, DType::F32));
  ops::Cast c;
  c.to = DType::F8E5M2;
  c.saturate = false;
  c.round_mode = E8M0Round::Nearest;
  Value y = g.apply(c, {x});
  EXPECT_EQ(g.shape(y).dtype, DType::F8E5M2);
  g.add_output(y);
  EXPECT_NE(g.to_text().find("saturate=false"), std::string::npos) << g.to_text();
  ops::Cast bad;
  bad.round_mode = static_cast<E8M0Round>(7);
  EXPECT_THAT(testing::error_message([&] { g.apply(bad, {x}); }), ::testing::HasSubstr("round_mode"));
}

}  // namespace
}  // namespace rlx
