// ONNX graphs whose nodes are not in topological order are sorted on import (main graph and
// subgraph bodies, outer names read by bodies included); a cycle, a node reading its own output
// and a value nothing produces are rlx::Errors naming the node. Each test builds its model here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "onnx/onnx_builder.h"
#include "rlx/onnx.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;

Tensor x4() { return Tensor::f32({4}, std::vector<float>{-2, -0.5f, 1, 3}); }

// y = Relu(Neg(x + w) * x), its four nodes written in `order` (a permutation of 0..3).
OnnxBuilder chain(const std::vector<int>& order) {
  OnnxBuilder b(17);
  b.input("x", kF32, {4}).output("y").initializer("w", Tensor::f32({4}, std::vector<float>{1, 2, 3, 4}));
  for (int k : order) {
    switch (k) {
      case 0: b.node("Add", {"x", "w"}, {"s"}, "add"); break;
      case 1: b.node("Neg", {"s"}, {"n"}, "neg"); break;
      case 2: b.node("Mul", {"n", "x"}, {"m"}, "mul"); break;
      default: b.node("Relu", {"m"}, {"y"}, "relu"); break;
    }
  }
  return b;
}

std::vector<double> run_chain(const OnnxBuilder& b) {
  return testing::to_doubles(testing::run_cpu1(testing::import_built(b), {{"x", x4()}}));
}

TEST(OnnxTopoSort, UnsortedNodesAreSorted) {
  const std::vector<double> want = run_chain(chain({0, 1, 2, 3}));
  ASSERT_EQ(want, (std::vector<double>{0, 0.75, 0, 0}));  // Relu(-(x + w) * x)
  for (const auto& order : std::vector<std::vector<int>>{{3, 2, 1, 0}, {1, 0, 3, 2}, {2, 3, 0, 1}, {3, 0, 2, 1}})
    EXPECT_EQ(run_chain(chain(order)), want) << "order " << order[0] << order[1] << order[2] << order[3];
}

// then: Neg(t), else: Abs(t), where t = x * 2 comes from a node written after the If.
TEST(OnnxTopoSort, AValueReadByASubgraphBodyIsProducedFirst) {
  OnnxBuilder then_b, else_b;
  then_b.output("a");
  then_b.node("Neg", {"t"}, {"a"});
  else_b.output("e");
  else_b.node("Abs", {"t"}, {"e"});
  OnnxBuilder b(13);
  b.input("c", onnx::TensorProto::BOOL, {}).input("x", kF32, {4}).output("y");
  b.initializer("two", Tensor::f32({}, std::vector<float>{2}));
  auto& n = b.node("If", {"c"}, {"y"}, "branch");
  set_attr(n, "then_branch", then_b.graph());
  set_attr(n, "else_branch", else_b.graph());
  b.node("Mul", {"x", "two"}, {"t"}, "double");
  const Graph g = testing::import_built(b);
  const uint8_t yes = 1, no = 0;
  EXPECT_EQ(testing::to_doubles(testing::run_cpu1(g, {{"c", Tensor::boolean({}, {&yes, 1})}, {"x", x4()}})),
            (std::vector<double>{4, 1, -2, -6}));
  EXPECT_EQ(testing::to_doubles(testing::run_cpu1(g, {{"c", Tensor::boolean({}, {&no, 1})}, {"x", x4()}})),
            (std::vector<double>{4, 1, 2, 6}));
}

// A Loop body whose nodes are written backwards: acc <- (acc + x) * 2, three times.
TEST(OnnxTopoSort, UnsortedBodyNodesAreSorted) {
  OnnxBuilder body;
  body.input("i", onnx::TensorProto::INT64, {}).input("cin", onnx::TensorProto::BOOL, {}).input("acc", kF32, {4});
  body.output("cout", onnx::TensorProto::BOOL).output("acc2");
  body.initializer("k", Tensor::f32({}, std::vector<float>{2}));
  body.node("Mul", {"sum", "k"}, {"acc2"}, "body_mul");
  body.node("Add", {"acc", "x"}, {"sum"}, "body_add");
  body.node("Identity", {"cin"}, {"cout"});
  OnnxBuilder b(13);
  b.input("x", kF32, {4}).output("y");
  b.initializer("m", Tensor::scalar_i64(3)).initializer("zero", Tensor::f32({4}, std::vector<float>{0, 0, 0, 0}));
  set_attr(b.node("Loop", {"m", "", "zero"}, {"y"}), "body", body.graph());
  // acc: 2x, 6x, 14x
  EXPECT_EQ(testing::to_doubles(testing::run_cpu1(testing::import_built(b), {{"x", x4()}})),
            (std::vector<double>{-28, -7, 14, 42}));
}

TEST(OnnxTopoSort, ACycleIsAnErrorNamingItsNodes) {
  OnnxBuilder b(17);
  b.input("x", kF32, {4}).output("y");
  b.node("Relu", {"c"}, {"y"}, "out");
  b.node("Add", {"x", "c"}, {"a"}, "first");
  b.node("Neg", {"a"}, {"n"}, "second");
  b.node("Abs", {"n"}, {"c"}, "third");
  const std::string msg = testing::error_message([&] { testing::import_built(b); });
  EXPECT_THAT(msg, AllOf(HasSubstr("cycle"), HasSubstr("'first'"), HasSubstr("'second'"), HasSubstr("'third'"),
                         HasSubstr("'a'"), HasSubstr("'n'"), HasSubstr("'c'")));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("'out'")));
}

TEST(OnnxTopoSort, ANodeReadingItsOwnOutputIsAnError) {
  OnnxBuilder b(17);
  b.input("x", kF32, {4}).output("y");
  b.node("Add", {"x", "y"}, {"y"}, "selfish");
  EXPECT_THAT(testing::error_message([&] { testing::import_built(b); }),
              AllOf(HasSubstr("'selfish'"), HasSubstr("its own output 'y'")));
}

TEST(OnnxTopoSort, AValueNothingProducesIsAnErrorNamingTheReader) {
  OnnxBuilder b(17);
  b.input("x", kF32, {4}).output("y");
  b.node("Relu", {"s"}, {"y"}, "reader");
  b.node("Add", {"x", "ghost"}, {"s"}, "adder");
  EXPECT_THAT(testing::error_message([&] { testing::import_built(b); }),
              AllOf(HasSubstr("'adder'"), HasSubstr("'ghost'"), HasSubstr("not produced by any node")));
}

}  // namespace
}  // namespace rlx
