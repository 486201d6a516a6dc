// ONNX Loop nodes whose trip count or condition is only known at run time: imported as an IR
// While (iteration, keep going, trip count, carried values, captured values) that the CPU runs;
// loops with known trip counts are still unrolled.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "onnx/onnx_builder.h"
#include "rlx/onnx.h"
#include "rlx/session.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;
constexpr int32_t kI64 = onnx::TensorProto::INT64;
constexpr int32_t kBool = onnx::TensorProto::BOOL;

bool has_op(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes())
    if (std::string(op_name(n.op)) == name) return true;
  return false;
}

// body(i, c, v): v' = v * 2 + i + bias (bias: an outer run-time value), c' = c, [scan: v'].
onnx::GraphProto doubling_body(bool with_scan) {
  OnnxBuilder body;
  body.input("i", kI64, {}).input("c", kBool, {}).input("v", kF32, {3});
  body.output("c_out", kBool).output("v_out");
  if (with_scan) body.output("v_scan");
  body.initializer("two", Tensor::scalar_f32(2.0f));
  body.node("Identity", {"c"}, {"c_out"});
  body.node("Mul", {"v", "two"}, {"v2"});
  auto& cast = body.node("Cast", {"i"}, {"fi"});
  set_attr(cast, "to", int64_t{kF32});
  body.node("Add", {"v2", "fi"}, {"v3"});
  body.node("Add", {"v3", "bias"}, {"v_out"});
  if (with_scan) body.node("Identity", {"v_out"}, {"v_scan"});
  return body.graph();
}

// y = Loop(n, "", x) with the doubling body; n (int64 scalar) is a graph input.
OnnxBuilder trip_count_model(bool with_scan = false) {
  OnnxBuilder b(17);
  b.input("x", kF32, {3}).input("n", kI64, {}).input("bias", kF32, {3}).output("y");
  if (with_scan) b.output("ys");
  std::vector<std::string> outs{"y"};
  if (with_scan) outs.push_back("ys");
  auto& n = b.node("Loop", {"n", "", "x"}, outs, "doubling");
  set_attr(n, "body", doubling_body(with_scan));
  return b;
}

std::vector<float> reference_doubling(std::vector<float> v, int64_t n, const std::vector<float>& bias) {
  for (int64_t i = 0; i < n; ++i)
    for (size_t k = 0; k < v.size(); ++k) v[k] = v[k] * 2 + static_cast<float>(i) + bias[k];
  return v;
}

TEST(OnnxLoopRuntime, TripCountFromAnInputRunsAsAWhile) {
  const Graph g = testing::import_built(trip_count_model());
  EXPECT_TRUE(has_op(g, "while"));
  const std::vector<float> x{1, -2, 0.5f}, bias{0.25f, 0, -1};
  for (int64_t n : {0, 1, 5}) {
    const auto got = testing::run_cpu(g, {{"x", Tensor::f32({3}, x)},
                                          {"n", Tensor::scalar_i64(n)},
                                          {"bias", Tensor::f32({3}, bias)}});
    EXPECT_EQ(got[0].to_f32(), reference_doubling(x, n, bias)) << "n = " << n;
  }
  // Through OnnxModel (rlx run): one compiled graph serves every trip count.
  const std::string bytes = trip_count_model().bytes();
  OnnxModel m(bytes.data(), bytes.size(), "");
  for (int64_t n : {3, 7})
    EXPECT_EQ(m.run({{"x", Tensor::f32({3}, x)}, {"n", Tensor::scalar_i64(n)}, {"bias", Tensor::f32({3}, bias)}})[0]
                  .to_f32(),
              reference_doubling(x, n, bias));
  EXPECT_EQ(m.stats().imports, 1);
  // For a device without While the trip count is a value input (the loop unrolls per value).
  OnnxModelOptions gpu;
  gpu.device = Device::Cuda;
  EXPECT_EQ(OnnxModel(bytes.data(), bytes.size(), "", gpu).value_inputs(), (std::vector<std::string>{"n"}));
}

TEST(OnnxLoopRuntime, KnownTripCountsAreStillUnrolled) {
  OnnxImportOptions o;
  o.known_inputs = {{"n", Tensor::scalar_i64(3)}};
  const Graph g = testing::import_built(trip_count_model(), o);
  EXPECT_FALSE(has_op(g, "while"));
  const std::vector<float> x{1, 2, 3}, bias{0, 0, 0};
  EXPECT_EQ(testing::run_cpu(g, {{"x", Tensor::f32({3}, x)}, {"n", Tensor::scalar_i64(3)}, {"bias", Tensor::f32({3}, bias)}})[0]
                .to_f32(),
            reference_doubling(x, 3, bias));
}

// while sum(v) < limit: v = v * 2 + i + bias; the condition is computed from the carried value.
TEST(OnnxLoopRuntime, DataDependentConditionStopsTheLoop) {
  OnnxBuilder body;
  body.input("i", kI64, {}).input("c", kBool, {}).input("v", kF32, {3});
  body.output("c_out", kBool).output("v_out");
  body.initializer("two", Tensor::scalar_f32(2.0f));
  body.node("Mul", {"v", "two"}, {"v_out"});
  auto& sum = body.node("ReduceSum", {"v_out"}, {"s"});
  set_attr(sum, "keepdims", int64_t{0});
  body.node("Less", {"s", "limit"}, {"c_out"});
  OnnxBuilder b(17);
  b.input("x", kF32, {3}).input("limit", kF32, {}).output("y");
  auto& s0 = b.node("ReduceSum", {"x"}, {"s0"});
  set_attr(s0, "keepdims", int64_t{0});
  b.node("Less", {"s0", "limit"}, {"c0"});
  auto& n = b.node("Loop", {"", "c0", "x"}, {"y"}, "grow");
  set_attr(n, "body", body.graph());
  const Graph g = testing::import_built(b);
  EXPECT_TRUE(has_op(g, "while"));
  const auto run = [&](float limit) {
    return testing::run_cpu(g, {{"x", Tensor::f32({3}, std::vector<float>{1, 1, 1})}, {"limit", Tensor::scalar_f32(limit)}})[0]
        .to_f32();
  };
  EXPECT_EQ(run(100), (std::vector<float>{64, 64, 64}));  // 3 * 64 = 192 >= 100
  EXPECT_EQ(run(2), (std::vector<float>{1, 1, 1}));        // the initial condition is false
}

// Scan outputs of a loop whose length is only known at run time have no static shape: an
// error naming the node and what to do.
TEST(OnnxLoopRuntime, ScanOutputsWithARunTimeTripCountAreAnError) {
  try {
    testing::import_built(trip_count_model(true));
    FAIL() << "the import succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("'doubling' (Loop"), HasSubstr("scan outputs"),
                                             HasSubstr("known_inputs"), HasSubstr("rlx run")));
  }
}

// With scan outputs the loop must unroll: OnnxModel specializes on the trip count's value.
TEST(OnnxLoopRuntime, ScanOutputsUnrollPerTripCountThroughOnnxModel) {
  const std::string bytes = trip_count_model(true).bytes();
  OnnxModel m(bytes.data(), bytes.size(), "");
  EXPECT_EQ(m.value_inputs(), (std::vector<std::string>{"n"}));
  const std::vector<float> x{1, -2, 0.5f}, bias{0.25f, 0, -1};
  for (int64_t n : {2, 4, 2}) {
    const auto got = m.run({{"x", Tensor::f32({3}, x)}, {"n", Tensor::scalar_i64(n)}, {"bias", Tensor::f32({3}, bias)}});
    EXPECT_EQ(got[0].to_f32(), reference_doubling(x, n, bias));
    ASSERT_EQ(got[1].shape(), (std::vector<int64_t>{n, 3}));
    const auto ys = got[1].to_f32();
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(std::vector<float>(ys.begin() + i * 3, ys.begin() + i * 3 + 3), reference_doubling(x, i + 1, bias));
  }
  EXPECT_EQ(m.stats().imports, 2);
  EXPECT_EQ(m.stats().hits, 1);
}

// A body that changes a carried value's shape cannot run as a While (its values keep their shapes).
TEST(OnnxLoopRuntime, ACarriedValueThatChangesShapeIsAnError) {
  OnnxBuilder body;
  body.input("i", kI64, {}).input("c", kBool, {}).input("v", kF32, {3});
  body.output("c", kBool).output("v2");
  auto& cat = body.node("Concat", {"v", "v"}, {"v2"});
  set_attr(cat, "axis", int64_t{0});
  OnnxBuilder b(17);
  b.input("x", kF32, {3}).input("n", kI64, {}).output("y");
  auto& n = b.node("Loop", {"n", "", "x"}, {"y"}, "grow");
  set_attr(n, "body", body.graph());
  try {
    testing::import_built(b);
    FAIL() << "the import succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("'grow' (Loop"), HasSubstr("carried value 0 ('v')"),
                                             HasSubstr("f32[3]"), HasSubstr("f32[6]")));
  }
}

// A Scan over a symbolic sequence length needs the dim: an OnnxDimsError (OnnxModel binds it).
TEST(OnnxLoopRuntime, ScanOverASymbolicLengthNeedsTheDim) {
  OnnxBuilder body;
  body.input("acc", kF32, {2}).input("row", kF32, {2});
  body.output("acc2").output("row2");
  body.node("Add", {"acc", "row"}, {"acc2"});
  body.node("Identity", {"acc2"}, {"row2"});
  OnnxBuilder b(17);
  b.input("init", kF32, {2}).input("xs", kF32, {-1, 2}, {"steps"}).output("total").output("partial");
  auto& n = b.node("Scan", {"init", "xs"}, {"total", "partial"}, "cumulate");
  set_attr(n, "num_scan_inputs", int64_t{1});
  set_attr(n, "body", body.graph());
  try {
    testing::import_built(b);
    FAIL() << "the import succeeded";
  } catch (const OnnxDimsError& e) {
    EXPECT_THAT(e.node(), HasSubstr("cumulate"));
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("'steps'"), HasSubstr("--dim")));
  }
  const std::string bytes = b.bytes();
  OnnxModel m(bytes.data(), bytes.size(), "");
  const auto out = m.run({{"init", Tensor::f32({2}, std::vector<float>{0, 1})},
                          {"xs", Tensor::f32({3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6})}});
  EXPECT_EQ(out[0].to_f32(), (std::vector<float>{9, 13}));
  EXPECT_EQ(out[1].to_f32(), (std::vector<float>{1, 3, 4, 7, 9, 13}));
}

// A loop that never stops is stopped by the size policy's iteration limit, with an rlx::Error.
TEST(OnnxLoopRuntime, EndlessLoopsHitTheIterationLimit) {
  OnnxBuilder body;
  body.input("i", kI64, {}).input("c", kBool, {}).input("v", kF32, {1});
  body.output("c", kBool).output("v");
  OnnxBuilder b(17);
  b.input("x", kF32, {1}).input("go", kBool, {}).output("y");
  auto& n = b.node("Loop", {"", "go", "x"}, {"y"}, "forever");
  set_attr(n, "body", body.graph());
  const Graph g = testing::import_built(b);
  CompileOptions co;
  co.limits.max_loop_iterations = 1000;
  CompiledGraph cg = Session(Device::Cpu).compile(g, co);
  try {
    cg.run({{"x", Tensor::f32({1}, std::vector<float>{1})}, {"go", Tensor::boolean({}, std::vector<uint8_t>{1})}});
    FAIL() << "the loop ended";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("max_loop_iterations"));
  }
  EXPECT_EQ(cg.run({{"x", Tensor::f32({1}, std::vector<float>{1})}, {"go", Tensor::boolean({}, std::vector<uint8_t>{0})}})[0]
                .to_f32(),
            std::vector<float>{1});
}

}  // namespace
}  // namespace rlx
