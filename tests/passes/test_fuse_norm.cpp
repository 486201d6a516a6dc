// fuse_residual_ln, fuse_residual_rms_norm, fuse_rms_norm_reshape, fuse_swiglu.
#include "passes/fusion.h"
#include "passes/pass_test_util.h"

namespace rlx {
namespace {

using namespace passes;
using testing::count_op;
using testing::pass_fn;
using testing::same_numbers;

Graph residual_norm(bool rms, bool beta, bool extra_use = false, int64_t axis = -1, bool sum_output = false) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3, 8}));
  Value r = g.input("r", Shape::of({2, 3, 8}));
  Value s = g.add(x, r);
  std::vector<int64_t> pdims = axis == -1 ? std::vector<int64_t>{8} : std::vector<int64_t>{3, 8};
  Value gamma = g.param("gamma", Shape::from(pdims));
  std::optional<Value> b;
  if (beta) b = g.param("beta", Shape::from(pdims));
  g.add_output(rms ? g.rms_norm(s, gamma, b, 1e-6, axis) : g.layer_norm(s, gamma, b, 1e-5, axis));
  if (extra_use) g.add_output(g.relu(s));
  if (sum_output) g.add_output(s);
  return g;
}

TEST(FuseResidualNorm, LayerNormWithAndWithoutBeta) {
  for (bool beta : {true, false}) {
    Graph g = residual_norm(false, beta);
    Graph f = fuse_residual_ln(g);
    EXPECT_EQ(count_op(f, "fused_residual_ln"), 1u);
    EXPECT_EQ(count_op(f, "binary") + count_op(f, "layer_norm"), 0u);
    EXPECT_EQ(std::get<ops::FusedResidualLN>(f.node(f.outputs()[0].node).op).has_bias, beta);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_residual_ln)));
  }
}

TEST(FuseResidualNorm, RmsNormTwoOrThreeInputs) {
  for (bool beta : {false, true}) {
    Graph g = residual_norm(true, beta);
    Graph f = fuse_residual_rms_norm(g);
    EXPECT_EQ(count_op(f, "fused_residual_rms_norm"), 1u);
    EXPECT_EQ(count_op(fuse_residual_ln(g), "fused_residual_ln"), 0u);  // the LN pass ignores RmsNorm
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_residual_rms_norm)));
  }
}

TEST(FuseResidualNorm, NearMisses) {
  EXPECT_EQ(count_op(fuse_residual_ln(residual_norm(false, true, true)), "fused_residual_ln"), 0u);  // 2nd consumer
  EXPECT_EQ(count_op(fuse_residual_ln(residual_norm(false, true, false, -1, true)), "fused_residual_ln"), 0u);
  EXPECT_EQ(count_op(fuse_residual_ln(residual_norm(false, true, false, 1)), "fused_residual_ln"), 0u);  // 2 axes
  {  // broadcasting residual
    Graph g;
    Value x = g.input("x", Shape::of({2, 3, 8}));
    Value r = g.input("r", Shape::of({8}));
    g.add_output(g.layer_norm(g.add(x, r), g.param("gamma", Shape::of({8})), std::nullopt));
    EXPECT_EQ(count_op(fuse_residual_ln(g), "fused_residual_ln"), 0u);
  }
  {  // sub, not add
    Graph g;
    Value x = g.input("x", Shape::of({2, 8}));
    g.add_output(g.layer_norm(g.sub(x, x), g.param("gamma", Shape::of({8})), std::nullopt));
    EXPECT_EQ(count_op(fuse_residual_ln(g), "fused_residual_ln"), 0u);
  }
}

Graph rms_then_reshape(std::vector<Dim> to, int64_t axis = -1, bool extra = false) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3, 8}));
  std::vector<int64_t> pd = axis == -1 ? std::vector<int64_t>{8} : std::vector<int64_t>{3, 8};
  Value y = g.rms_norm(x, g.param("gamma", Shape::from(pd)), std::nullopt, 1e-6, axis);
  g.add_output(g.reshape(y, std::move(to)));
  if (extra) g.add_output(y);
  return g;
}

TEST(FuseRmsNormReshape, NormComputedInFlattenedShape) {
  Graph g = rms_then_reshape({6, 8});
  Graph f = fuse_rms_norm_reshape(g);
  const Node& out = f.node(f.outputs()[0].node);
  ASSERT_TRUE(std::holds_alternative<ops::RmsNorm>(out.op));
  EXPECT_EQ(f.node(out.inputs[0].node).outputs[0].concrete(), (std::vector<int64_t>{6, 8}));
  EXPECT_TRUE(same_numbers(g, pass_fn(fuse_rms_norm_reshape)));
}

TEST(FuseRmsNormReshape, NearMisses) {
  auto fired = [](const Graph& g) {
    Graph f = fuse_rms_norm_reshape(g);
    return std::holds_alternative<ops::RmsNorm>(f.node(f.outputs()[0].node).op);
  };
  EXPECT_FALSE(fired(rms_then_reshape({2, 24})));      // not a leading-dims flatten
  EXPECT_FALSE(fired(rms_then_reshape({6, 4, 2})));    // splits the normalized axis
  EXPECT_FALSE(fired(rms_then_reshape({6, 8}, 1)));    // normalized over two axes
  EXPECT_FALSE(fired(rms_then_reshape({6, 8}, -1, true)));  // the norm is also an output
}

// mul(narrow(c, 0..N), silu(narrow(c, N..2N))) and the gate-first layout.
Graph swiglu_split(bool gate_first, int64_t plain_start, int64_t gate_start, int64_t n = 4, int64_t axis = 2,
                   bool extra = false) {
  Graph g;
  Value c = g.input("c", Shape::of({2, 3, 8}));
  Value plain = g.narrow(c, axis, plain_start, n);
  Value gate = g.silu(g.narrow(c, axis, gate_start, n));
  g.add_output(gate_first ? g.mul(gate, plain) : g.mul(plain, gate));
  if (extra) g.add_output(plain);
  return g;
}

TEST(FuseSwiglu, BothLayouts) {
  {
    Graph g = swiglu_split(false, 0, 4);
    Graph f = fuse_swiglu(g);
    ASSERT_EQ(count_op(f, "fused_swiglu"), 1u);
    EXPECT_FALSE(std::get<ops::FusedSwiGLU>(f.node(f.outputs()[0].node).op).gate_first);
    EXPECT_EQ(count_op(f, "narrow"), 0u);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_swiglu)));
  }
  {
    Graph g = swiglu_split(true, 4, 0);
    Graph f = fuse_swiglu(g);
    ASSERT_EQ(count_op(f, "fused_swiglu"), 1u);
    EXPECT_TRUE(std::get<ops::FusedSwiGLU>(f.node(f.outputs()[0].node).op).gate_first);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_swiglu)));
  }
}

TEST(FuseSwiglu, NearMisses) {
  EXPECT_EQ(count_op(fuse_swiglu(swiglu_split(false, 0, 3, 3)), "fused_swiglu"), 0u);   // not exact halves
  EXPECT_EQ(count_op(fuse_swiglu(swiglu_split(false, 4, 0)), "fused_swiglu"), 1u);      // gate first half: fires
  EXPECT_EQ(count_op(fuse_swiglu(swiglu_split(false, 0, 1, 1, 1)), "fused_swiglu"), 0u);  // not the last axis
  EXPECT_EQ(count_op(fuse_swiglu(swiglu_split(false, 0, 4, 4, 2, true)), "fused_swiglu"), 0u);  // narrow reused
  EXPECT_TRUE(same_numbers(swiglu_split(false, 4, 0), pass_fn(fuse_swiglu)));
}

}  // namespace
}  // namespace rlx
