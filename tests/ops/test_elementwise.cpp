// Binary, Compare and Where against naive double references: every kind x every accepted
// dtype, numpy broadcasting (rank growth, size-1, zero-size, parallel sizes), integer
// semantics (truncating div, floored mod, wrapping), IEEE float cases and bad inputs.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <cstring>

#include "backends/cpu/elementwise_core.h"
#include "ops/elementwise_test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using elemtest::bcast;
using elemtest::bcast_index;
using elemtest::run_op;
using elemtest::uniform;
using elemtest::wrap_to;
using testing::all_close;
using testing::error_message;
using testing::from_doubles;
using testing::to_doubles;
using testing::unravel;

constexpr BinaryKind kAllBinary[] = {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div,
                                     BinaryKind::Max, BinaryKind::Min, BinaryKind::Pow, BinaryKind::Mod,
                                     BinaryKind::FMod, BinaryKind::And, BinaryKind::Or, BinaryKind::Xor,
                                     BinaryKind::Shl, BinaryKind::Shr};

bool binary_accepts(BinaryKind k, DType t) {
  if (k == BinaryKind::And || k == BinaryKind::Or || k == BinaryKind::Xor) return t == DType::Bool || is_int(t);
  if (k == BinaryKind::Shl || k == BinaryKind::Shr) return elemtest::is_unsigned(t);
  if (k == BinaryKind::Max || k == BinaryKind::Min) return true;
  return t != DType::Bool;
}

double ref_int_pow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0;
  int64_t r = 1;
  for (int64_t i = 0; i < e; ++i) r = static_cast<int64_t>(static_cast<uint64_t>(r) * static_cast<uint64_t>(b));
  return static_cast<double>(r);
}

double ref_binary(BinaryKind k, DType t, double a, double b) {
  if (t == DType::Bool) {
    const bool x = a != 0, y = b != 0;
    switch (k) {
      case BinaryKind::And: case BinaryKind::Min: return x && y;
      case BinaryKind::Or: case BinaryKind::Max: return x || y;
      default: return x != y;
    }
  }
  if (is_float(t)) {
    switch (k) {
      case BinaryKind::Add: return a + b;
      case BinaryKind::Sub: return a - b;
      case BinaryKind::Mul: return a * b;
      case BinaryKind::Div: return a / b;
      case BinaryKind::Max: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
      case BinaryKind::Min: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
      case BinaryKind::Pow: return std::pow(a, b);
      case BinaryKind::Mod: {
        double r = std::fmod(a, b);
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        return r;
      }
      case BinaryKind::FMod: return std::fmod(a, b);
      default: return NAN;
    }
  }
  const auto x = static_cast<int64_t>(a), y = static_cast<int64_t>(b);
  switch (k) {
    case BinaryKind::Add: return wrap_to(t, x + y);
    case BinaryKind::Sub: return wrap_to(t, x - y);
    case BinaryKind::Mul: return wrap_to(t, x * y);
    case BinaryKind::Div: return wrap_to(t, x / y);  // C++ truncates toward zero
    case BinaryKind::Max: return static_cast<double>(std::max(x, y));
    case BinaryKind::Min: return static_cast<double>(std::min(x, y));
    case BinaryKind::Pow: return wrap_to(t, static_cast<int64_t>(ref_int_pow(x, y)));
    case BinaryKind::Mod: return static_cast<double>(x - y * static_cast<int64_t>(std::floor(static_cast<double>(x) / static_cast<double>(y))));
    case BinaryKind::FMod: return static_cast<double>(x % y);
    case BinaryKind::And: return wrap_to(t, x & y);  // two's complement bits of the values
    case BinaryKind::Or: return wrap_to(t, x | y);
    case BinaryKind::Xor: return wrap_to(t, x ^ y);
    case BinaryKind::Shl:
    case BinaryKind::Shr: {  // unsigned; the bit width or more shifts everything out
      const auto bits = static_cast<int64_t>(8 * dtype_size(t));
      if (y >= bits) return 0;
      const auto u = static_cast<uint64_t>(x);
      return wrap_to(t, static_cast<int64_t>(k == BinaryKind::Shl ? u << y : u >> y));
    }
    default: return NAN;
  }
}

// Operand values suited to the kind and dtype (divisors away from 0, pow bases positive for floats).
std::vector<double> operand(BinaryKind k, DType t, int64_t n, bool rhs, uint64_t seed) {
  const bool divlike = k == BinaryKind::Div || k == BinaryKind::Mod || k == BinaryKind::FMod;
  std::vector<double> v;
  if (is_float(t)) {
    if (k == BinaryKind::Pow) v = rhs ? uniform(t, n, -2, 2, seed) : uniform(t, n, 0.1, 2, seed);
    else v = uniform(t, n, -3, 3, seed);
    if (rhs && divlike)
      for (auto& x : v) x = x < 0 ? std::min(x, -0.25) : std::max(x, 0.25);
  } else if (t == DType::Bool) {
    v = uniform(t, n, 0, 1, seed);
  } else {
    const bool u = elemtest::is_unsigned(t);
    const auto bits = static_cast<double>(8 * dtype_size(t));
    if (k == BinaryKind::Pow) v = rhs ? uniform(t, n, u ? 0 : -2, 5, seed) : uniform(t, n, u ? 0 : -4, 5, seed);
    else if ((k == BinaryKind::Shl || k == BinaryKind::Shr) && rhs) v = uniform(t, n, 0, bits + 3, seed);  // past the width too
    else if (k == BinaryKind::Shr && u) v = uniform(t, n, 0, std::ldexp(1.0, static_cast<int>(bits) - 1), seed);
    else v = uniform(t, n, u ? 0 : -60, 60, seed);
    if (rhs && divlike)
      for (auto& x : v)
        if (x == 0) x = 7;
  }
  return v;
}

Tensor run_binary(BinaryKind k, const Tensor& a, const Tensor& b) { return run_op(ops::Binary{k}, {a, b}); }

void check_binary(BinaryKind k, DType t, const std::vector<int64_t>& da, const std::vector<int64_t>& db,
                  uint64_t seed) {
  SCOPED_TRACE(std::string(enum_name(k)) + " " + dtype_name(t) + " " + dims_str(da) + " x " + dims_str(db));
  std::vector<double> va = operand(k, t, product(da), false, seed), vb = operand(k, t, product(db), true, seed + 1);
  if (k == BinaryKind::Pow && is_int(t) && !elemtest::is_unsigned(t)) {
    // Avoid 0 ** negative (an error, tested separately): make such exponents positive.
    const auto od = bcast({da, db});
    for (int64_t i = 0; i < product(od); ++i) {
      const auto oi = unravel(i, od);
      if (va[bcast_index(oi, da)] == 0) vb[bcast_index(oi, db)] = std::fabs(vb[bcast_index(oi, db)]);
    }
  }
  const Tensor a = from_doubles(t, da, va), b = from_doubles(t, db, vb);
  const auto xa = to_doubles(a), xb = to_doubles(b);
  const auto od = bcast({da, db});
  std::vector<double> want(static_cast<size_t>(product(od)));
  for (int64_t i = 0; i < product(od); ++i) {
    const auto oi = unravel(i, od);
    want[i] = ref_binary(k, t, xa[bcast_index(oi, da)], xb[bcast_index(oi, db)]);
  }
  const Tensor out = run_binary(k, a, b);
  EXPECT_EQ(out.dtype(), t);
  EXPECT_TRUE(all_close(out, od, want));
}

TEST(ElementwiseBinary, EveryKindEveryDtype) {
  uint64_t seed = 1;
  for (BinaryKind k : kAllBinary)
    for (DType t : elemtest::kAllTypes) {
      if (!binary_accepts(k, t)) continue;
      check_binary(k, t, {2, 3, 4}, {2, 3, 4}, seed++);
      check_binary(k, t, {3, 1, 4}, {5, 1}, seed++);
    }
}

TEST(ElementwiseBinary, BroadcastShapes) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{2, 3, 4}, {4}},        {{4}, {2, 3, 4}},     {{2, 1, 4}, {3, 1}},   {{}, {2, 3}},
      {{2, 3}, {}},            {{}, {}},             {{1}, {5, 1, 1}},      {{0, 3}, {3}},
      {{2, 0, 3}, {1, 1, 3}},  {{4, 1, 3, 1}, {5, 1, 2}}, {{1, 1}, {1}},   {{3, 1}, {1, 0}},
      {{2, 3, 4, 5}, {3, 1, 5}}, {{6, 1, 1, 7}, {1, 5, 2, 1}}};
  uint64_t seed = 100;
  for (const auto& [da, db] : cases) {
    check_binary(BinaryKind::Add, DType::F32, da, db, seed++);
    check_binary(BinaryKind::Sub, DType::I32, da, db, seed++);
  }
}

TEST(ElementwiseBinary, LargeParallelPaths) {
  check_binary(BinaryKind::Mul, DType::F32, {40000}, {40000}, 7);        // flat same-shape loop
  check_binary(BinaryKind::Add, DType::F32, {64, 300}, {300}, 8);        // row broadcast
  check_binary(BinaryKind::Sub, DType::F16, {300, 64}, {300, 1}, 9);     // column broadcast
  check_binary(BinaryKind::Max, DType::F64, {7, 50, 60}, {7, 1, 60}, 10);  // middle broadcast
  check_binary(BinaryKind::Div, DType::I64, {3, 7001}, {7001}, 11);
}

TEST(ElementwiseBinary, IntegerSemantics) {
  auto run_i = [](BinaryKind k, DType t, std::vector<double> a, std::vector<double> b) {
    const auto n = static_cast<int64_t>(a.size());
    return to_doubles(run_binary(k, from_doubles(t, {n}, a), from_doubles(t, {n}, b)));
  };
  // Div truncates toward zero; Mod is floored (sign of the divisor); FMod truncated.
  EXPECT_EQ(run_i(BinaryKind::Div, DType::I32, {-7, 7, -7, 7}, {2, -2, -2, 2}), (std::vector<double>{-3, -3, 3, 3}));
  EXPECT_EQ(run_i(BinaryKind::Mod, DType::I32, {-7, 7, -7, 7, 6}, {3, -3, -3, 3, -3}),
            (std::vector<double>{2, -2, -1, 1, 0}));
  EXPECT_EQ(run_i(BinaryKind::FMod, DType::I16, {-7, 7, -7, 7}, {3, -3, -3, 3}), (std::vector<double>{-1, 1, -1, 1}));
  // Wrapping overflow.
  EXPECT_EQ(run_i(BinaryKind::Add, DType::U8, {200, 0}, {100, 0}), (std::vector<double>{44, 0}));
  EXPECT_EQ(run_i(BinaryKind::Sub, DType::U32, {0}, {1}), (std::vector<double>{4294967295.0}));
  EXPECT_EQ(run_i(BinaryKind::Add, DType::I32, {2147483647}, {1}), (std::vector<double>{-2147483648.0}));
  EXPECT_EQ(run_i(BinaryKind::Mul, DType::I16, {300}, {300}), (std::vector<double>{static_cast<int16_t>(90000)}));
  EXPECT_EQ(run_i(BinaryKind::Div, DType::I32, {-2147483648.0}, {-1}), (std::vector<double>{-2147483648.0}));
  EXPECT_EQ(run_i(BinaryKind::Mod, DType::I32, {-2147483648.0}, {-1}), (std::vector<double>{0}));
  EXPECT_EQ(run_i(BinaryKind::FMod, DType::I8, {-128}, {-1}), (std::vector<double>{0}));
  // Pow: negative exponents truncate; overflow wraps.
  EXPECT_EQ(run_i(BinaryKind::Pow, DType::I32, {2, 1, -1, -1, 3, 0, 5}, {-1, -5, -3, -2, 0, 0, 3}),
            (std::vector<double>{0, 1, -1, 1, 1, 1, 125}));
  EXPECT_EQ(run_i(BinaryKind::Pow, DType::I8, {2}, {7}), (std::vector<double>{-128}));
  // i64 extremes.
  const int64_t mn = std::numeric_limits<int64_t>::min();
  const Tensor a = Tensor::i64({2}, std::vector<int64_t>{mn, mn});
  const Tensor b = Tensor::i64({2}, std::vector<int64_t>{-1, -1});
  EXPECT_EQ(run_binary(BinaryKind::Div, a, b).to_i64(), (std::vector<int64_t>{mn, mn}));
  EXPECT_EQ(run_binary(BinaryKind::Mod, a, b).to_i64(), (std::vector<int64_t>{0, 0}));
}

TEST(ElementwiseBinary, IntegerDivisionByZeroIsAnError) {
  for (BinaryKind k : {BinaryKind::Div, BinaryKind::Mod, BinaryKind::FMod})
    for (DType t : elemtest::kIntTypes) {
      SCOPED_TRACE(std::string(enum_name(k)) + " " + dtype_name(t));
      const Tensor a = from_doubles(t, {2, 3}, {1, 2, 3, 4, 5, 6});
      const Tensor b = from_doubles(t, {3}, {1, 0, 2});
      const std::string msg = error_message([&] { run_binary(k, a, b); });
      EXPECT_THAT(msg, HasSubstr("division by zero"));
      EXPECT_THAT(msg, HasSubstr(enum_name(k)));
    }
  // A zero divisor that is never used (empty output) is fine.
  const Tensor e = run_binary(BinaryKind::Div, from_doubles(DType::I32, {0, 2}, {}), from_doubles(DType::I32, {2}, {0, 1}));
  EXPECT_EQ(e.shape(), (std::vector<int64_t>{0, 2}));
  const std::string msg = error_message([&] {
    run_binary(BinaryKind::Pow, from_doubles(DType::I64, {2}, {2, 0}), from_doubles(DType::I64, {2}, {1, -2}));
  });
  EXPECT_THAT(msg, HasSubstr("0 raised to the negative power"));
}

TEST(ElementwiseBinary, FloatIeeeCases) {
  const double inf = INFINITY;
  for (DType t : elemtest::kFloatTypes) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor a = from_doubles(t, {6}, {1, -1, 0, NAN, 2, -7.5});
    const Tensor b = from_doubles(t, {6}, {0, 0, 0, 1, NAN, 2});
    EXPECT_TRUE(all_close(run_binary(BinaryKind::Div, a, b), {6}, {inf, -inf, NAN, NAN, NAN, -3.75}));
    EXPECT_TRUE(all_close(run_binary(BinaryKind::Max, a, b), {6}, {1, 0, 0, NAN, NAN, 2}));
    EXPECT_TRUE(all_close(run_binary(BinaryKind::Min, a, b), {6}, {0, -1, 0, NAN, NAN, -7.5}));
    EXPECT_TRUE(all_close(run_binary(BinaryKind::Mod, a, b), {6}, {NAN, NAN, NAN, NAN, NAN, 0.5}));
    EXPECT_TRUE(all_close(run_binary(BinaryKind::FMod, a, b), {6}, {NAN, NAN, NAN, NAN, NAN, -1.5}));
  }
  // Floored mod by an infinite divisor of the other sign gives the divisor (Python semantics).
  const Tensor m = run_binary(BinaryKind::Mod, from_doubles(DType::F64, {2}, {-1, 1}), from_doubles(DType::F64, {2}, {inf, inf}));
  EXPECT_TRUE(all_close(m, {2}, {inf, 1}));
}

TEST(ElementwiseBinary, SymbolicBroadcastInference) {
  const Shape a({Dim::symbol("b"), 1, 4}, DType::F32);
  const Shape b({3, 1}, DType::F32);
  const Shape o = elemtest::infer1(ops::Binary{BinaryKind::Add}, {a, b});
  EXPECT_EQ(o, Shape({Dim::symbol("b"), 3, 4}, DType::F32));
  const Shape o2 = elemtest::infer1(ops::Compare{CompareKind::Lt}, {Shape({Dim::symbol("s")}, DType::I32),
                                                                    Shape({Dim::symbol("s")}, DType::I32)});
  EXPECT_EQ(o2, Shape({Dim::symbol("s")}, DType::Bool));
}

// The bit patterns themselves: negative operands, all-ones, shifts at and past the width, Not.
TEST(ElementwiseBinary, BitwiseOpsOnTheBits) {
  const Tensor a = Tensor::i32({4}, std::vector<int32_t>{-1, 0x0F0F0F0F, -2147483647 - 1, 12345});
  const Tensor b = Tensor::i32({4}, std::vector<int32_t>{0x00FF00FF, -1, 1, -12346});
  auto ints = [](const Tensor& t) {
    std::vector<int32_t> v(t.data<int32_t>(), t.data<int32_t>() + t.numel());
    return v;
  };
  EXPECT_EQ(ints(run_binary(BinaryKind::And, a, b)), (std::vector<int32_t>{0x00FF00FF, 0x0F0F0F0F, 0, 12345 & -12346}));
  EXPECT_EQ(ints(run_binary(BinaryKind::Or, a, b)), (std::vector<int32_t>{-1, -1, -2147483647, 12345 | -12346}));
  EXPECT_EQ(ints(run_binary(BinaryKind::Xor, a, b)), (std::vector<int32_t>{static_cast<int32_t>(0xFF00FF00), static_cast<int32_t>(0xF0F0F0F0), -2147483647, 12345 ^ -12346}));
  EXPECT_EQ(ints(run_op(ops::Activation{ActKind::Not}, {a})), (std::vector<int32_t>{0, static_cast<int32_t>(0xF0F0F0F0), 2147483647, -12346}));
  const Tensor u = Tensor::from_bytes(DType::U8, {5}, std::vector<uint8_t>{0x81, 0x81, 0x81, 0x81, 0xFF}.data(), 5);
  const Tensor n = Tensor::from_bytes(DType::U8, {5}, std::vector<uint8_t>{1, 7, 8, 255, 0}.data(), 5);
  auto bytes = [](const Tensor& t) { return std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + t.numel()); };
  EXPECT_EQ(bytes(run_binary(BinaryKind::Shl, u, n)), (std::vector<uint8_t>{0x02, 0x80, 0, 0, 0xFF}));
  EXPECT_EQ(bytes(run_binary(BinaryKind::Shr, u, n)), (std::vector<uint8_t>{0x40, 0x01, 0, 0, 0xFF}));
  EXPECT_EQ(bytes(run_op(ops::Activation{ActKind::Not}, {u})), (std::vector<uint8_t>{0x7E, 0x7E, 0x7E, 0x7E, 0}));
}

TEST(ElementwiseBinary, BadInputs) {
  Graph g;
  Value f32 = g.input("a", Shape::of({2, 3}));
  Value f16 = g.input("b", Shape::of({2, 3}, DType::F16));
  Value v4 = g.input("c", Shape::of({4}));
  Value bl = g.input("d", Shape::of({2, 3}, DType::Bool));
  std::string msg = error_message([&] { g.add(f32, f16); });
  EXPECT_THAT(msg, HasSubstr("dtypes differ"));
  EXPECT_THAT(msg, HasSubstr("f16[2,3]"));
  msg = error_message([&] { g.add(f32, v4); });
  EXPECT_THAT(msg, HasSubstr("do not broadcast"));
  EXPECT_THAT(msg, HasSubstr("f32[4]"));
  msg = error_message([&] { g.binary(BinaryKind::And, f32, f32); });
  EXPECT_THAT(msg, HasSubstr("needs bool (logical) or integer (bitwise) operands"));
  Value i32 = g.input("e", Shape::of({2, 3}, DType::I32));
  msg = error_message([&] { g.binary(BinaryKind::Shl, i32, i32); });
  EXPECT_THAT(msg, HasSubstr("shifts take unsigned integers"));
  msg = error_message([&] { g.binary(BinaryKind::Shr, f32, f32); });
  EXPECT_THAT(msg, HasSubstr("shifts take unsigned integers"));
  msg = error_message([&] { g.act(ActKind::Not, f32); });
  EXPECT_THAT(msg, HasSubstr("needs a bool (logical not) or integer (bitwise not) input"));
  msg = error_message([&] { g.add(bl, bl); });
  EXPECT_THAT(msg, HasSubstr("bool operands are not supported"));
  msg = error_message([&] { g.compare(CompareKind::Eq, f32, f16); });
  EXPECT_THAT(msg, HasSubstr("dtypes differ"));
  msg = error_message([&] { g.compare(CompareKind::Eq, f32, v4); });
  EXPECT_THAT(msg, HasSubstr("do not broadcast"));
  msg = error_message([&] { g.where(f32, f32, f32); });
  EXPECT_THAT(msg, HasSubstr("cond must be bool"));
  msg = error_message([&] { g.where(bl, f32, f16); });
  EXPECT_THAT(msg, HasSubstr("same dtype"));
  msg = error_message([&] { g.where(bl, f32, v4); });
  EXPECT_THAT(msg, HasSubstr("do not broadcast"));
}

// ---- Compare ---------------------------------------------------------------
constexpr CompareKind kAllCompare[] = {CompareKind::Eq, CompareKind::Ne, CompareKind::Lt,
                                       CompareKind::Le, CompareKind::Gt, CompareKind::Ge};

double ref_compare(CompareKind k, double a, double b) {
  switch (k) {
    case CompareKind::Eq: return a == b;
    case CompareKind::Ne: return a != b;
    case CompareKind::Lt: return a < b;
    case CompareKind::Le: return a <= b;
    case CompareKind::Gt: return a > b;
    case CompareKind::Ge: return a >= b;
  }
  return NAN;
}

TEST(ElementwiseCompare, EveryKindEveryDtype) {
  uint64_t seed = 300;
  for (CompareKind k : kAllCompare)
    for (DType t : elemtest::kAllTypes) {
      SCOPED_TRACE(std::string(enum_name(k)) + " " + dtype_name(t));
      const std::vector<int64_t> da = {3, 1, 4}, db = {5, 1};
      // Small integer values so that ties occur.
      const double lo = t == DType::Bool ? 0 : (elemtest::is_unsigned(t) ? 0 : -3);
      const double hi = t == DType::Bool ? 1 : 4;
      auto va = uniform(is_float(t) ? DType::I32 : t, product(da), lo, hi, seed++);
      auto vb = uniform(is_float(t) ? DType::I32 : t, product(db), lo, hi, seed++);
      if (is_float(t)) va[0] = NAN;
      const Tensor a = from_doubles(t, da, va), b = from_doubles(t, db, vb);
      const auto od = bcast({da, db});
      std::vector<double> want(static_cast<size_t>(product(od)));
      for (int64_t i = 0; i < product(od); ++i) {
        const auto oi = unravel(i, od);
        want[i] = ref_compare(k, va[bcast_index(oi, da)], vb[bcast_index(oi, db)]);
      }
      const Tensor out = run_op(ops::Compare{k}, {a, b});
      EXPECT_EQ(out.dtype(), DType::Bool);
      EXPECT_TRUE(all_close(out, od, want));
    }
}

TEST(ElementwiseCompare, LargeAndZeroSize) {
  const Tensor a = testing::random_tensor(DType::F32, {50, 400}, 5);
  const Tensor b = testing::random_tensor(DType::F32, {400}, 6);
  const auto xa = to_doubles(a), xb = to_doubles(b);
  std::vector<double> want(xa.size());
  for (size_t i = 0; i < xa.size(); ++i) want[i] = xa[i] < xb[i % 400];
  EXPECT_TRUE(all_close(run_op(ops::Compare{CompareKind::Lt}, {a, b}), {50, 400}, want));
  const Tensor z = run_op(ops::Compare{CompareKind::Eq}, {from_doubles(DType::I8, {0, 3}, {}), from_doubles(DType::I8, {1, 3}, {1, 2, 3})});
  EXPECT_EQ(z.shape(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(z.dtype(), DType::Bool);
}

// ---- Where -----------------------------------------------------------------
void check_where(DType t, const std::vector<int64_t>& dc, const std::vector<int64_t>& da,
                 const std::vector<int64_t>& db, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + dims_str(dc) + " " + dims_str(da) + " " + dims_str(db));
  const Tensor c = testing::random_tensor(DType::Bool, dc, seed);
  const Tensor a = testing::random_tensor(t, da, seed + 1, -100, 100);
  const Tensor b = testing::random_tensor(t, db, seed + 2, -100, 100);
  const auto xc = to_doubles(c), xa = to_doubles(a), xb = to_doubles(b);
  const auto od = bcast({dc, da, db});
  std::vector<double> want(static_cast<size_t>(product(od)));
  for (int64_t i = 0; i < product(od); ++i) {
    const auto oi = unravel(i, od);
    want[i] = xc[bcast_index(oi, dc)] != 0 ? xa[bcast_index(oi, da)] : xb[bcast_index(oi, db)];
  }
  const Tensor out = run_op(ops::Where{}, {c, a, b});
  EXPECT_EQ(out.dtype(), t);
  EXPECT_TRUE(all_close(out, od, want, {0, 0}));
}

TEST(ElementwiseWhere, EveryDtypeAndBroadcast) {
  uint64_t seed = 500;
  for (DType t : elemtest::kAllTypes) {
    check_where(t, {3, 4}, {3, 4}, {3, 4}, seed += 3);
    check_where(t, {3, 1}, {1, 4}, {2, 3, 4}, seed += 3);
    check_where(t, {}, {3}, {2, 1}, seed += 3);
  }
  check_where(DType::F32, {2, 0, 3}, {3}, {1}, 900);
  check_where(DType::F32, {200, 1}, {200, 100}, {100}, 901);  // parallel + scalar cond rows
  check_where(DType::I64, {20000}, {20000}, {20000}, 902);
}

// binary_span on f32 rows (the region kernel's and the matmul epilogue's step; 8-lane AVX2 loop
// where the CPU has it): every kind bit-identical to the scalar IEEE formula, element-wise and
// with either operand broadcast, row lengths around the vector width, NaN, infinities, signed
// zeros and denormals among the values.
TEST(Elementwise, BinarySpanF32MatchesTheScalarFormulaBitForBit) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a(64), b(64);
  const float specials[] = {0.f, -0.f, inf, -inf, nan, 1e-40f, -1e-40f, 3.5f, -2.25f, 1.f};
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = i % 7 == 3 ? specials[i % 10] : static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * 5);
    b[i] = i % 5 == 1 ? specials[(i * 3) % 10] : static_cast<float>(std::cos(0.3 * static_cast<double>(i)) * 3);
  }
  auto ref = [](BinaryKind k, float x, float y) {
    switch (k) {
      case BinaryKind::Add: return x + y;
      case BinaryKind::Sub: return x - y;
      case BinaryKind::Mul: return x * y;
      case BinaryKind::Div: return x / y;
      case BinaryKind::Max: return (x > y || x != x) ? x : y;
      default: return (x < y || x != x) ? x : y;  // Min
    }
  };
  auto bits = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return v != v ? 0x7fc00000u : u;  // any NaN
  };
  for (BinaryKind k : {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div, BinaryKind::Max,
                       BinaryKind::Min})
    for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 64})
      for (auto [sa, sb] : {std::pair<int64_t, int64_t>{1, 1}, {0, 1}, {1, 0}, {0, 0}}) {
        std::vector<float> out(static_cast<size_t>(n), -7.f);
        cpu::binary_span(k, DType::F32, a.data(), sa, b.data(), sb, out.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const float want = ref(k, a[static_cast<size_t>(i * sa)], b[static_cast<size_t>(i * sb)]);
          ASSERT_EQ(bits(out[static_cast<size_t>(i)]), bits(want))
              << enum_name(k) << " n " << n << " strides " << sa << "," << sb << " at " << i;
        }
      }
}

}  // namespace
}  // namespace rlx
