// ElementwiseRegion: step chains over broadcast inputs (scalar, row, column, same-shape),
// mixed dtypes through Compare/Where/Cast steps, block boundaries, run-time errors inside
// steps, and inference validation of the chain.
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/elementwise_test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using elemtest::bcast;
using elemtest::bcast_index;
using elemtest::run_op;
using ops::RegionStep;
using testing::all_close;
using testing::error_message;
using testing::from_doubles;
using testing::random_tensor;
using testing::to_doubles;
using testing::unravel;

RegionStep bin(BinaryKind k, int32_t a, int32_t b) { return {RegionStepKind::Binary, static_cast<int32_t>(k), DType::F32, {a, b}}; }
RegionStep cmp(CompareKind k, int32_t a, int32_t b) { return {RegionStepKind::Compare, static_cast<int32_t>(k), DType::F32, {a, b}}; }
RegionStep act(ActKind k, int32_t a) { return {RegionStepKind::Activation, static_cast<int32_t>(k), DType::F32, {a}}; }
RegionStep cast(DType to, int32_t a) { return {RegionStepKind::Cast, 0, to, {a}}; }
RegionStep where(int32_t c, int32_t a, int32_t b) { return {RegionStepKind::Where, 0, DType::F32, {c, a, b}}; }

ops::ElementwiseRegion region(std::vector<RegionStep> steps) {
  ops::ElementwiseRegion r;
  r.steps = std::move(steps);
  return r;
}

double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

// gelu(x * y + b) with x [..], y and b broadcast.
void check_mul_add_gelu(DType t, const std::vector<int64_t>& dx, const std::vector<int64_t>& dy,
                        const std::vector<int64_t>& db, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + dims_str(dx) + " " + dims_str(dy) + " " + dims_str(db));
  const Tensor x = random_tensor(t, dx, seed, -2, 2), y = random_tensor(t, dy, seed + 1, -2, 2),
               b = random_tensor(t, db, seed + 2, -1, 1);
  const auto vx = to_doubles(x), vy = to_doubles(y), vb = to_doubles(b);
  const auto od = bcast({dx, dy, db});
  std::vector<double> want(static_cast<size_t>(product(od)));
  for (int64_t i = 0; i < product(od); ++i) {
    const auto oi = unravel(i, od);
    want[i] = gelu(vx[bcast_index(oi, dx)] * vy[bcast_index(oi, dy)] + vb[bcast_index(oi, db)]);
  }
  const auto op = region({bin(BinaryKind::Mul, 0, 1), bin(BinaryKind::Add, -1, 2), act(ActKind::Gelu, -2)});
  const Tensor out = run_op(op, {x, y, b});
  EXPECT_EQ(out.dtype(), t);
  // The region rounds f16/bf16 after each step, like the standalone ops: allow for 3 roundings.
  auto tol = testing::default_tolerance(t);
  tol.rtol *= 3;
  tol.atol *= 3;
  EXPECT_TRUE(all_close(out, od, want, tol));
}

TEST(ElementwiseRegion, ChainOverBroadcastInputs) {
  check_mul_add_gelu(DType::F32, {2, 3, 4}, {4}, {}, 10);
  check_mul_add_gelu(DType::F64, {2, 3, 4}, {2, 3, 4}, {3, 1}, 20);
  check_mul_add_gelu(DType::F16, {5, 7}, {1, 7}, {5, 1}, 30);
  check_mul_add_gelu(DType::BF16, {3}, {2, 1}, {1}, 40);
  check_mul_add_gelu(DType::F32, {3, 1000}, {1000}, {3, 1}, 50);   // gathered rows crossing 1024-element blocks
  check_mul_add_gelu(DType::F32, {40, 1030}, {40, 1030}, {}, 60);  // parallel blocks, direct + scalar inputs
  check_mul_add_gelu(DType::F32, {1, 5}, {4, 1}, {1}, 70);         // output larger than every input
  check_mul_add_gelu(DType::F32, {0, 5}, {5}, {}, 80);             // zero-size
}

// f16 Binary steps run on F16C lanes through the f32 loop (widen, f32 math, one rounding): the
// bits of the standalone ops (one software conversion per value), for every kind that path
// takes, element-wise and scalar operands, blocks ending in short tails, NaN, infinities,
// signed zeros and products past the f16 range.
TEST(ElementwiseRegion, HalfBinaryStepsMatchTheStandaloneOps) {
  for (const std::vector<int64_t>& dx : {std::vector<int64_t>{1029}, std::vector<int64_t>{3, 1031}}) {
    Tensor x = random_tensor(DType::F16, dx, 90, -300, 300);
    const int64_t n = x.numel();
    std::vector<double> vx = to_doubles(x);
    const double specials[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 65504.0, -60000.0, 1e-7};
    for (size_t i = 0; i < 8; ++i) vx[static_cast<size_t>(i * 97 % n)] = specials[i];
    x = from_doubles(DType::F16, dx, vx);
    const Tensor y = random_tensor(DType::F16, dx, 91, -300, 300), c = random_tensor(DType::F16, {}, 92, 1, 2);
    for (BinaryKind k : {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div, BinaryKind::Max,
                         BinaryKind::Min}) {
      SCOPED_TRACE(std::string(enum_name(k)) + " " + dims_str(dx));
      // region: (x k y) k c, one step element-wise, one against a scalar
      const Tensor fused = run_op(region({bin(k, 0, 1), bin(k, -1, 2)}), {x, y, c});
      ops::Binary op;
      op.kind = k;
      const Tensor alone = run_op(op, {run_op(op, {x, y}), c});
      const auto* a = static_cast<const uint16_t*>(fused.raw());
      const auto* b = static_cast<const uint16_t*>(alone.raw());
      for (int64_t i = 0; i < n; ++i) {
        const bool nan_a = (a[i] & 0x7c00) == 0x7c00 && (a[i] & 0x3ff), nan_b = (b[i] & 0x7c00) == 0x7c00 && (b[i] & 0x3ff);
        if (nan_a || nan_b) {
          ASSERT_TRUE(nan_a && nan_b) << "at " << i;
          continue;
        }
        ASSERT_EQ(a[i], b[i]) << "at " << i;
      }
    }
  }
}

TEST(ElementwiseRegion, CompareWhereCastSteps) {
  // out = cast<f16>(where(x > t, exp(x), cast<f32>(k)))  with k an i32 input.
  const std::vector<int64_t> dx = {4, 300}, dk = {300};
  const Tensor x = random_tensor(DType::F32, dx, 1, -2, 2);
  const Tensor thr = Tensor::scalar_f32(0.25f);
  const Tensor k = random_tensor(DType::I32, dk, 2, -50, 50);
  const auto op = region({cmp(CompareKind::Gt, 0, 1), act(ActKind::Exp, 0), cast(DType::F32, 2),
                          where(-1, -2, -3), cast(DType::F16, -4)});
  const Tensor out = run_op(op, {x, thr, k});
  ASSERT_EQ(out.dtype(), DType::F16);
  const auto vx = to_doubles(x), vk = to_doubles(k);
  std::vector<double> want(vx.size());
  for (size_t i = 0; i < vx.size(); ++i) want[i] = vx[i] > 0.25 ? std::exp(vx[i]) : vk[i % 300];
  EXPECT_TRUE(all_close(out, dx, want));

  // A bool-valued region: not(a < b) xor c, over ints.
  const Tensor a = from_doubles(DType::I8, {2, 3}, {1, 5, -3, 0, 2, 2});
  const Tensor b = from_doubles(DType::I8, {3}, {2, 2, 2});
  const Tensor c = from_doubles(DType::Bool, {2, 1}, {1, 0});
  const Tensor o2 = run_op(region({cmp(CompareKind::Lt, 0, 1), act(ActKind::Not, -1), bin(BinaryKind::Xor, -2, 2)}),
                           {a, b, c});
  EXPECT_EQ(o2.dtype(), DType::Bool);
  EXPECT_EQ(to_doubles(o2), (std::vector<double>{1, 0, 1, 0, 1, 1}));
}

TEST(ElementwiseRegion, IntegerStepsAndRuntimeErrors) {
  const Tensor a = from_doubles(DType::I32, {2, 2}, {-7, 7, 9, -9});
  const Tensor b = from_doubles(DType::I32, {2}, {2, -4});
  // (a mod b) * 3 - a / b
  const auto op = region({bin(BinaryKind::Mod, 0, 1), bin(BinaryKind::Mul, -1, 2), bin(BinaryKind::Div, 0, 1),
                          bin(BinaryKind::Sub, -2, -3)});
  const Tensor three = from_doubles(DType::I32, {}, {3});
  EXPECT_EQ(to_doubles(run_op(op, {a, b, three})), (std::vector<double>{3 - (-3), -3 - (-1), 3 - 4, -3 - 2}));
  // A zero divisor computed by an earlier step.
  const auto bad = region({bin(BinaryKind::Sub, 1, 1), bin(BinaryKind::Div, 0, -1)});
  const std::string msg = error_message([&] { run_op(bad, {a, b}); });
  EXPECT_THAT(msg, HasSubstr("step 1"));
  EXPECT_THAT(msg, HasSubstr("division by zero"));
}

TEST(ElementwiseRegion, InferenceValidation) {
  const Shape f({2, 3}, DType::F32), h({3}, DType::F16), i({2, 1}, DType::I32);
  auto err = [&](std::vector<RegionStep> steps, std::vector<Shape> ins) {
    return error_message([&] { elemtest::infer1(region(std::move(steps)), ins); });
  };
  // Output: broadcast of all inputs, dtype of the last step.
  EXPECT_EQ(elemtest::infer1(region({act(ActKind::Neg, 1), cmp(CompareKind::Eq, -1, 1)}), {f, i}),
            Shape({2, 3}, DType::Bool));
  EXPECT_EQ(elemtest::infer1(region({cast(DType::F16, 0), bin(BinaryKind::Add, -1, 1)}),
                             {Shape({Dim::symbol("n"), 1}, DType::F32), h}),
            Shape({Dim::symbol("n"), 3}, DType::F16));
  EXPECT_THAT(err({act(ActKind::Exp, -2), act(ActKind::Exp, 0)}, {f}), HasSubstr("not an earlier step"));
  EXPECT_THAT(err({act(ActKind::Exp, -1)}, {f}), HasSubstr("not an earlier step"));
  EXPECT_THAT(err({act(ActKind::Exp, 3)}, {f}), HasSubstr("region has 1 input"));
  EXPECT_THAT(err({bin(BinaryKind::Add, 0, 1)}, {f, h}), HasSubstr("dtypes differ"));
  EXPECT_THAT(err({RegionStep{RegionStepKind::Binary, 0, DType::F32, {0}}}, {f}), HasSubstr("expects 2 argument"));
  EXPECT_THAT(err({act(ActKind::Exp, 0)}, {i}), HasSubstr("needs a float input"));
  EXPECT_THAT(err({where(0, 0, 0)}, {f}), HasSubstr("cond must be bool"));
  EXPECT_THAT(err({cmp(CompareKind::Lt, 0, 0), where(-1, 0, 1)}, {f, i}), HasSubstr("same dtype"));
  EXPECT_THAT(err({RegionStep{RegionStepKind::Binary, 99, DType::F32, {0, 0}}}, {f}), HasSubstr("invalid op value 99"));
  EXPECT_THAT(err({RegionStep{RegionStepKind::Activation, 256 + 1, DType::F32, {0}}}, {f}), HasSubstr("invalid op value"));
  EXPECT_THAT(err({cast(static_cast<DType>(77), 0)}, {f}), HasSubstr("invalid target dtype"));
  EXPECT_THAT(err({}, {f}), HasSubstr("at least one step"));
  EXPECT_THAT(err({act(ActKind::Exp, 0)}, {f, Shape({4}, DType::F32)}), HasSubstr("do not broadcast"));
}

}  // namespace
}  // namespace rlx
