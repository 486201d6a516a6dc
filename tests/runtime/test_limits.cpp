// The size policy (rlx/limits.h): overflowing and oversized shapes are rlx::Errors naming the
// node at shape inference, never a wrapped byte count; allocation failures name the size;
// While loops without a trip count stop at the policy's cap; limits are overridable.
#include <limits>
#include <memory>
#include <vector>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_message;

constexpr int64_t kHuge = (int64_t{1} << 62) + 1;  // x 4 bytes wraps to 4 in 64 bits

TEST(Limits, CheckedArithmeticRejectsOverflowAndNegatives) {
  EXPECT_EQ(checked_mul(1 << 20, 1 << 20, "t"), int64_t{1} << 40);
  EXPECT_THAT(error_message([] { checked_mul(int64_t{1} << 32, int64_t{1} << 32, "slot"); }),
              HasSubstr("slot: 4294967296 x 4294967296 overflows"));
  EXPECT_THAT(error_message([] { checked_add(std::numeric_limits<int64_t>::max(), 1, "end"); }), HasSubstr("overflows"));
  EXPECT_THAT(error_message([] { checked_mul(-1, 2, "x"); }), HasSubstr("negative"));
  // A zero dim makes the count 0 even when the other dims alone would overflow.
  EXPECT_EQ(checked_numel({kHuge, kHuge, 0}, "t"), 0);
  EXPECT_THAT(error_message([] { checked_numel({kHuge, 4}, "input 'x'"); }),
              HasSubstr("input 'x': shape [4611686018427387905,4] has more elements than a 64-bit count holds"));
  EXPECT_THAT(error_message([] { checked_nbytes({kHuge}, DType::F32, "w"); }), HasSubstr("more than the limit"));
}

TEST(Limits, ShapeByteCountNeverWraps) {
  const Shape s = Shape::of({kHuge});
  EXPECT_THAT(error_message([&] { (void)s.nbytes(); }), HasSubstr("max_tensor_elements"));
  const Shape t = Shape::of({int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31});
  EXPECT_THAT(error_message([&] { (void)t.numel(); }), HasSubstr("more elements than a 64-bit count holds"));
}

TEST(Limits, HugeInputShapeIsRejectedAtTheNode) {
  Graph g;
  EXPECT_THAT(error_message([&] { g.input("x", Shape::of({kHuge})); }),
              AllOf(HasSubstr("node 0 (input 'x')"), HasSubstr("4611686018427387905"), HasSubstr("max_tensor_elements")));
}

TEST(Limits, ExpandRngAndReshapeToHugeShapesAreRejectedAtInference) {
  {
    Graph g;
    const Value x = g.input("x", Shape::of({1}));
    EXPECT_THAT(error_message([&] { g.expand(x, {Dim(kHuge)}); }),
                AllOf(HasSubstr("node 1 (expand)"), HasSubstr("output 0")));
  }
  {
    Graph g;
    ops::RngUniform op;
    op.shape = Shape::of({kHuge});
    EXPECT_THAT(error_message([&] { g.apply(op, {}); }), AllOf(HasSubstr("node 0 (rng_uniform)"), HasSubstr("limit")));
  }
  {
    Graph g;
    const Value x = g.input("x", Shape::of({4}));
    // The target's product overflows before it could be compared with the input's 4 elements.
    EXPECT_THAT(error_message([&] { g.reshape(x, {Dim(int64_t{1} << 32), Dim(int64_t{1} << 32), Dim(4)}); }),
                AllOf(HasSubstr("node 1 (reshape)"), HasSubstr("overflows")));
    // ... and a product that wraps to exactly 4 must not be accepted either.
    EXPECT_THAT(error_message([&] { g.reshape(x, {Dim(int64_t{1} << 62), Dim(4), Dim(4), Dim(4), Dim(4)}); }),
                HasSubstr("overflows"));
  }
}

TEST(Limits, NarrowStartPlusLengthCannotOverflow) {
  Graph g;
  const Value x = g.input("x", Shape::of({8}));
  EXPECT_THAT(error_message([&] { g.narrow(x, 0, 2, std::numeric_limits<int64_t>::max()); }),
              AllOf(HasSubstr("node 1 (narrow)"), HasSubstr("out of bounds")));
  EXPECT_THAT(error_message([&] { g.narrow(x, 0, -3, std::numeric_limits<int64_t>::max() - 1); }),
              HasSubstr("out of bounds"));
}

TEST(Limits, PadConvTransposeAndWindowArithmeticIsChecked) {
  {
    Graph g;
    const Value x = g.input("x", Shape::of({8}));
    ops::Pad p;
    p.pads = {std::numeric_limits<int64_t>::max(), 1};
    EXPECT_THAT(error_message([&] { g.apply(p, {x}); }), AllOf(HasSubstr("node 1 (pad)"), HasSubstr("overflows")));
    p.pads = {int64_t{1} << 50, 0};  // fits int64, far above the size policy
    EXPECT_THAT(error_message([&] { g.apply(p, {x}); }), HasSubstr("max_tensor_elements"));
  }
  {
    Graph g;
    const Value x = g.input("x", Shape::of({1, 1, 8, 8}));
    ops::Pool p;
    p.kind = PoolKind::Max;
    p.kernel = {3, 3};
    p.dilation = {int64_t{1} << 62, 1};  // dilation x (kernel - 1) = 2^63
    EXPECT_THAT(error_message([&] { g.apply(p, {x}); }), AllOf(HasSubstr("node 1 (pool)"), HasSubstr("overflows")));
  }
  {
    Graph g;
    const Value x = g.input("x", Shape::of({1, 1, 8, 8}));
    const Value w = g.param("w", Shape::of({1, 1, 2, 2}));
    ops::ConvTranspose c;
    c.stride = {int64_t{1} << 61, 1};
    EXPECT_THAT(error_message([&] { g.apply(c, {x, w}); }), HasSubstr("overflows"));
  }
}

TEST(Limits, SymbolicDimBoundAtRunTimeIsCheckedWhenSpecialized) {
  Graph g;
  const Value x = g.input("x", Shape({Dim::symbol("n"), Dim(1)}));
  g.add_output(g.expand(x, {Dim::symbol("n"), Dim(int64_t{1} << 37)}));  // 512 GiB per row of n
  CompiledGraph m = Session(Device::Cpu).compile(g);
  EXPECT_THAT(error_message([&] { m.run({{"x", Tensor::f32({4, 1}, std::vector<float>{1, 2, 3, 4})}}); }),
              AllOf(HasSubstr("(expand)"), HasSubstr("max_tensor_bytes")));
}

TEST(Limits, CompileOptionsOverrideTheDefaults) {
  Graph g;
  const Value x = g.input("x", Shape::of({4}));
  g.add_output(g.expand(g.reshape(x, {Dim(4), Dim(1)}), {Dim(4), Dim(1000)}));  // 16000 bytes
  CompileOptions small;
  small.limits.max_tensor_bytes = 1024;
  EXPECT_THAT(error_message([&] { Session(Device::Cpu).compile(g, small); }),
              AllOf(HasSubstr("16000 bytes"), HasSubstr("limit of 1024"), HasSubstr("CompileOptions::limits")));
  CompiledGraph ok = Session(Device::Cpu).compile(g);  // the defaults allow it
  EXPECT_EQ(ok.run({{"x", Tensor::f32({4}, std::vector<float>{1, 2, 3, 4})}})[0].numel(), 4000);
  CompileOptions bad;
  bad.limits.max_loop_iterations = 0;
  EXPECT_THAT(error_message([&] { Session(Device::Cpu).compile(g, bad); }),
              HasSubstr("max_loop_iterations must be positive"));
}

TEST(Limits, ScopedLimitsNestAndRestore) {
  const int64_t before = active_limits().max_tensor_bytes;
  {
    Limits a;
    a.max_tensor_bytes = 100;
    ScopedLimits sa(a);
    EXPECT_EQ(active_limits().max_tensor_bytes, 100);
    {
      Limits b;
      b.max_tensor_bytes = 50;
      ScopedLimits sb(b);
      EXPECT_EQ(active_limits().max_tensor_bytes, 50);
      EXPECT_THAT(error_message([] { Tensor::empty(DType::F32, {13}); }), HasSubstr("52 bytes"));
    }
    EXPECT_EQ(active_limits().max_tensor_bytes, 100);
  }
  EXPECT_EQ(active_limits().max_tensor_bytes, before);
}

TEST(Limits, TensorAllocationChecksBeforeAllocating) {
  EXPECT_THAT(error_message([] { Tensor::empty(DType::F32, {kHuge}); }), HasSubstr("max_tensor_elements"));
  EXPECT_THAT(error_message([] { Tensor::empty(DType::F64, {int64_t{1} << 39}); }),
              HasSubstr("max_tensor_bytes"));  // 4 TiB
  const std::vector<float> four{1, 2, 3, 4};
  // The byte count is checked before a huge shape is allocated.
  EXPECT_THAT(error_message([&] { Tensor::from_bytes(DType::F32, {int64_t{1} << 38}, four.data(), 16); }),
              HasSubstr("got 16 bytes"));
  EXPECT_THAT(error_message([&] { Tensor::from_bytes(DType::F32, {kHuge}, four.data(), 16); }), HasSubstr("limit"));
}

// cond: always true; body: i + 1. max_iterations 0 = no trip count of its own.
Graph endless_loop(int64_t max_iterations) {
  const Shape i64({}, DType::I64);
  auto cond = std::make_shared<Graph>();
  {
    const Value i = cond->input("i", i64);
    cond->add_output(cond->compare(CompareKind::Ge, i, cond->scalar(0, DType::I64)));
  }
  auto body = std::make_shared<Graph>();
  {
    const Value i = body->input("i", i64);
    body->add_output(body->add(i, body->scalar(1, DType::I64)));
  }
  Graph g;
  const Value i = g.input("i", i64);
  g.set_outputs(g.apply_multi(ops::While{max_iterations, cond, body}, {i}));
  return g;
}

TEST(Limits, WhileWithoutTripCountStopsAtTheLimitWithAnError) {
  CompileOptions o;
  o.limits.max_loop_iterations = 500;
  CompiledGraph m = Session(Device::Cpu).compile(endless_loop(0), o);
  EXPECT_THAT(error_message([&] { m.run({{"i", Tensor::scalar_i64(0)}}); }),
              AllOf(HasSubstr("(while)"), HasSubstr("still true after 500 iterations"),
                    HasSubstr("max_loop_iterations")));
  // A loop with its own trip count stops there normally, even above the policy's cap.
  CompiledGraph capped = Session(Device::Cpu).compile(endless_loop(800), o);
  EXPECT_EQ(capped.run({{"i", Tensor::scalar_i64(0)}})[0].to_i64(), (std::vector<int64_t>{800}));
}

TEST(Limits, NonRlxExceptionsBecomeRlxErrorsAtTheBoundary) {
  EXPECT_THAT(error_message([] { translate_errors("compile", []() -> int { throw std::bad_alloc(); }); }),
              HasSubstr("compile: out of memory"));
  EXPECT_THAT(error_message([] { translate_errors("run", []() -> int { throw std::length_error("vector"); }); }),
              AllOf(HasSubstr("run: internal failure (vector)"), HasSubstr("report")));
  EXPECT_EQ(translate_errors("x", [] { return 7; }), 7);
}

}  // namespace
}  // namespace rlx
