#include "support/test_util.h"

using namespace rlx;
using ::testing::HasSubstr;

TEST(GraphCore, BuilderInfersAndPrints) {
  Graph g;
  auto x = g.input("x", Shape::of({2, 3}));
  auto w = g.param("w", Shape::of({3}));
  auto y = g.add(x, w);
  g.add_output(y, "y");
  EXPECT_EQ(g.shape(y).str(), "f32[2,3]");
  EXPECT_TRUE(g.verify_report().empty());
  const std::string text = g.to_text();
  EXPECT_THAT(text, HasSubstr("%2 = binary(%0, %1) {kind=add} -> f32[2,3]"));
  EXPECT_THAT(text, HasSubstr("outputs: y=%2"));
}

TEST(GraphCore, ErrorsNameTheNode) {
  Graph g;
  auto a = g.input("a", Shape::of({2, 3}));
  auto b = g.input("b", Shape::of({4}));
  auto msg = rlx::testing::error_message([&] { g.add(a, b); });
  EXPECT_THAT(msg, HasSubstr("node 2 (binary)"));
  EXPECT_THAT(msg, HasSubstr("f32[2,3]"));
  msg = rlx::testing::error_message([&] { g.input("a", Shape::of({1})); });
  EXPECT_THAT(msg, HasSubstr("duplicate input name 'a'"));
  msg = rlx::testing::error_message([&] { g.apply(ops::Binary{}, {a}); });
  EXPECT_THAT(msg, HasSubstr("takes 2 inputs, got 1"));
  msg = rlx::testing::error_message([&] { g.apply(ops::Binary{}, {a, Value{99, 0}}); });
  EXPECT_THAT(msg, HasSubstr("does not exist yet"));
}

TEST(GraphCore, VerifierReportsEveryProblem) {
  Graph g;
  auto a = g.input("a", Shape::of({2}));
  auto b = g.input("b", Shape::of({3}));
  // Bypass inference to construct a broken graph, as a buggy pass might.
  g.add_node_with_shapes(ops::Binary{}, {a, b}, {Shape::of({2})});
  g.add_node_with_shapes(ops::Activation{ActKind::Relu}, {a}, {Shape::of({5})});
  g.add_output(Value{2, 0});
  auto report = g.verify_report();
  ASSERT_EQ(report.size(), 2u);
  EXPECT_THAT(report[0], HasSubstr("node 2 (binary)"));
  EXPECT_THAT(report[1], HasSubstr("node 3 (activation)"));
  EXPECT_THAT(report[1], HasSubstr("differ from inferred"));
  auto msg = rlx::testing::error_message([&] { g.verify(); });
  EXPECT_THAT(msg, HasSubstr("2 problems"));
  Graph empty;
  EXPECT_THAT(rlx::testing::error_message([&] { empty.verify(); }), HasSubstr("no outputs"));
}

TEST(GraphCore, OpEqualityAndAttrs) {
  Op a = ops::Narrow{1, 2, 3};
  Op b = ops::Narrow{1, 2, 3};
  Op c = ops::Narrow{1, 2, 4};
  EXPECT_TRUE(op_equal(a, b));
  EXPECT_FALSE(op_equal(a, c));
  EXPECT_EQ(op_attrs_str(a), "axis=1 start=2 len=3");
  Op k1 = ops::Constant{Tensor::f32({2}, std::vector<float>{1, 2})};
  Op k2 = ops::Constant{Tensor::f32({2}, std::vector<float>{1, 3})};
  EXPECT_FALSE(op_equal(k1, k2));
  EXPECT_STREQ(op_name(ops::FusedSwiGLU{}), "fused_swiglu");
}

TEST(GraphCore, WeightsMustMatchParams) {
  Graph g;
  auto w = g.param("w", Shape::of({2}));
  g.add_output(w);
  g.set_weight("w", Tensor::f32({2}, std::vector<float>{1, 2}));
  EXPECT_THAT(rlx::testing::error_message([&] { g.set_weight("w", Tensor::f32({3}, std::vector<float>{1, 2, 3})); }),
              HasSubstr("does not match"));
  EXPECT_THAT(rlx::testing::error_message([&] { g.set_weight("nope", Tensor::f32({2}, std::vector<float>{1, 2})); }),
              HasSubstr("no param named 'nope'"));
}
