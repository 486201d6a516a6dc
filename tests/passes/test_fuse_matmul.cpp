// fuse_matmul_bias_act, fuse_swiglu_dual_matmul, fuse_shared_input_matmul: firing, near misses,
// unchanged numbers.
#include "passes/fusion.h"
#include "passes/pass_test_util.h"

namespace rlx {
namespace {

using passes::fuse_matmul_bias_act;
using passes::fuse_shared_input_matmul;
using passes::fuse_swiglu_dual_matmul;
using testing::count_op;
using testing::pass_fn;
using testing::same_numbers;

struct Mlp {
  Graph g;
  Value x, w, b, mm, add;
};
Mlp mlp(bool bias_first = false) {
  Mlp m;
  m.x = m.g.input("x", Shape::of({2, 5, 8}));
  m.w = m.g.param("w", Shape::of({8, 6}));
  m.b = m.g.param("b", Shape::of({6}));
  m.mm = m.g.matmul(m.x, m.w);
  m.add = bias_first ? m.g.add(m.b, m.mm) : m.g.add(m.mm, m.b);
  return m;
}

TEST(FuseMatMulBiasAct, FusesBiasAndGelu) {
  Mlp m = mlp();
  m.g.add_output(m.g.gelu(m.add));
  Graph f = fuse_matmul_bias_act(m.g);
  EXPECT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);
  EXPECT_EQ(count_op(f, "matmul") + count_op(f, "binary") + count_op(f, "activation"), 0u);
  const auto& node = f.node(f.outputs()[0].node);
  EXPECT_EQ(std::get<ops::FusedMatMulBiasAct>(node.op).activation, ActKind::Gelu);
  EXPECT_TRUE(same_numbers(m.g, pass_fn(fuse_matmul_bias_act)));
}

TEST(FuseMatMulBiasAct, BiasOnTheLeftAndNoActivation) {
  Mlp m = mlp(true);
  m.g.add_output(m.g.tanh(m.add));  // tanh is not an epilogue: stays separate
  Graph f = fuse_matmul_bias_act(m.g);
  EXPECT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);
  EXPECT_EQ(count_op(f, "activation"), 1u);
  EXPECT_FALSE(std::get<ops::FusedMatMulBiasAct>(f.node(f.node(f.outputs()[0].node).inputs[0].node).op).activation);
  EXPECT_TRUE(same_numbers(m.g, pass_fn(fuse_matmul_bias_act)));
}

TEST(FuseMatMulBiasAct, LateDeclaredBias) {
  // The bias param is declared after the matmul: the rewriter maps it on demand.
  Graph g;
  Value x = g.input("x", Shape::of({4, 8}));
  Value w = g.param("w", Shape::of({8, 3}));
  Value mm = g.matmul(x, w);
  Value b = g.param("late_bias", Shape::of({3}));
  g.add_output(g.silu(g.add(mm, b)));
  Graph f = fuse_matmul_bias_act(g);
  EXPECT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);
  EXPECT_EQ(f.param_nodes().size(), 2u);
  EXPECT_TRUE(same_numbers(g, pass_fn(fuse_matmul_bias_act)));
}

TEST(FuseMatMulBiasAct, NearMisses) {
  {  // the product has a second consumer
    Mlp m = mlp();
    m.g.add_output(m.add);
    m.g.add_output(m.g.relu(m.mm));
    EXPECT_EQ(count_op(fuse_matmul_bias_act(m.g), "fused_matmul_bias_act"), 0u);
  }
  {  // the product is a graph output
    Mlp m = mlp();
    m.g.add_output(m.add);
    m.g.add_output(m.mm);
    EXPECT_EQ(count_op(fuse_matmul_bias_act(m.g), "fused_matmul_bias_act"), 0u);
  }
  {  // bias of rank 2 (broadcast over rows, not the last axis only)
    Graph g;
    Value x = g.input("x", Shape::of({4, 8}));
    Value mm = g.matmul(x, g.param("w", Shape::of({8, 3})));
    g.add_output(g.add(mm, g.param("b", Shape::of({4, 1}))));
    EXPECT_EQ(count_op(fuse_matmul_bias_act(g), "fused_matmul_bias_act"), 0u);
  }
  {  // a bias that grows the product by broadcasting ([3] added to a 1-d product [1]... via rank-0 product)
    Graph g;
    Value x = g.input("x", Shape::of({8}));
    Value mm = g.matmul(x, g.input("v", Shape::of({8})));  // scalar
    g.add_output(g.add(mm, g.param("b", Shape::of({3}))));
    EXPECT_EQ(count_op(fuse_matmul_bias_act(g), "fused_matmul_bias_act"), 0u);
  }
  {  // the activation's input is an output: fuse the bias, keep the activation separate
    Mlp m = mlp();
    m.g.add_output(m.g.gelu(m.add));
    m.g.add_output(m.add);
    Graph f = fuse_matmul_bias_act(m.g);
    EXPECT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);
    EXPECT_EQ(count_op(f, "activation"), 1u);
    EXPECT_TRUE(same_numbers(m.g, pass_fn(fuse_matmul_bias_act)));
  }
}

// mul(x @ up, silu(x @ gate)) in either operand order.
Graph swiglu_mlp(bool silu_first, bool extra_use = false) {
  Graph g;
  Value x = g.input("x", Shape::of({3, 8}));
  Value up = g.matmul(x, g.param("up", Shape::of({8, 12})));
  Value gate = g.matmul(x, g.param("gate", Shape::of({8, 12})));
  Value s = g.silu(gate);
  Value y = silu_first ? g.mul(s, up) : g.mul(up, s);
  g.add_output(g.matmul(y, g.param("down", Shape::of({12, 8}))));
  if (extra_use) g.add_output(gate);
  return g;
}

TEST(FuseSwigluDualMatmul, BothOperandOrders) {
  for (bool silu_first : {false, true}) {
    Graph g = swiglu_mlp(silu_first);
    Graph f = fuse_swiglu_dual_matmul(g);
    EXPECT_EQ(count_op(f, "fused_swiglu"), 1u) << silu_first;
    EXPECT_EQ(count_op(f, "concat"), 1u);
    EXPECT_EQ(count_op(f, "matmul"), 2u);  // the fused up|gate product + down
    EXPECT_EQ(count_op(f, "activation"), 0u);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_swiglu_dual_matmul)));
  }
}

TEST(FuseSwigluDualMatmul, NearMisses) {
  EXPECT_EQ(count_op(fuse_swiglu_dual_matmul(swiglu_mlp(false, true)), "fused_swiglu"), 0u);  // gate is an output
  {  // different inputs to the two products
    Graph g;
    Value x = g.input("x", Shape::of({3, 8}));
    Value x2 = g.input("x2", Shape::of({3, 8}));
    Value up = g.matmul(x, g.param("up", Shape::of({8, 12})));
    Value gate = g.matmul(x2, g.param("gate", Shape::of({8, 12})));
    g.add_output(g.mul(up, g.silu(gate)));
    EXPECT_EQ(count_op(fuse_swiglu_dual_matmul(g), "fused_swiglu"), 0u);
  }
  {  // gelu instead of silu
    Graph g;
    Value x = g.input("x", Shape::of({3, 8}));
    Value up = g.matmul(x, g.param("up", Shape::of({8, 12})));
    Value gate = g.matmul(x, g.param("gate", Shape::of({8, 12})));
    g.add_output(g.mul(up, g.gelu(gate)));
    EXPECT_EQ(count_op(fuse_swiglu_dual_matmul(g), "fused_swiglu"), 0u);
  }
  {  // unequal widths
    Graph g;
    Value x = g.input("x", Shape::of({3, 8}));
    Value up = g.matmul(x, g.param("up", Shape::of({8, 1})));
    Value gate = g.matmul(x, g.param("gate", Shape::of({8, 12})));
    g.add_output(g.mul(up, g.silu(gate)));
    EXPECT_EQ(count_op(fuse_swiglu_dual_matmul(g), "fused_swiglu"), 0u);
  }
}

TEST(FuseSharedInputMatmul, Qkv3Way) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 4, 16}));
  Value q = g.matmul(x, g.param("wq", Shape::of({16, 16})));
  Value k = g.matmul(x, g.param("wk", Shape::of({16, 4})));
  Value v = g.matmul(x, g.param("wv", Shape::of({16, 4})));
  g.add_output(q, "q");
  g.add_output(g.relu(k), "k");
  g.add_output(v, "v");
  Graph f = fuse_shared_input_matmul(g);
  EXPECT_EQ(count_op(f, "matmul"), 1u);
  EXPECT_EQ(count_op(f, "concat"), 1u);
  EXPECT_EQ(count_op(f, "narrow"), 3u);
  EXPECT_EQ(f.output_names(), g.output_names());
  EXPECT_TRUE(same_numbers(g, pass_fn(fuse_shared_input_matmul)));
}

TEST(FuseSharedInputMatmul, Moe4WayUnequalWidthsLateParams) {
  Graph g;
  Value x = g.input("x", Shape::of({5, 8}));
  Value acc;
  const int64_t widths[] = {3, 7, 1, 5};
  for (int i = 0; i < 4; ++i) {
    // each expert's weight is declared right before its use: later than the first matmul
    Value y = g.matmul(x, g.param("e" + std::to_string(i), Shape::of({8, widths[i]})));
    Value s = g.sum(y, {-1}, true);
    acc = i == 0 ? s : g.add(acc, s);
  }
  g.add_output(acc);
  Graph f = fuse_shared_input_matmul(g);
  EXPECT_EQ(count_op(f, "matmul"), 1u);
  EXPECT_EQ(count_op(f, "narrow"), 4u);
  EXPECT_TRUE(same_numbers(g, pass_fn(fuse_shared_input_matmul)));
}

TEST(FuseSharedInputMatmul, NearMisses) {
  {  // different K: two groups of one
    Graph g;
    Value x = g.input("x", Shape::of({5, 8}));
    g.add_output(g.matmul(x, g.param("a", Shape::of({8, 3}))));
    g.add_output(g.matmul(g.narrow(x, 1, 0, 4), g.param("b", Shape::of({4, 3}))));
    EXPECT_EQ(count_op(fuse_shared_input_matmul(g), "concat"), 0u);
  }
  {  // a weight computed from an input is not a weight leaf
    Graph g;
    Value x = g.input("x", Shape::of({5, 8}));
    Value w = g.input("w", Shape::of({8, 3}));
    g.add_output(g.matmul(x, g.param("a", Shape::of({8, 3}))));
    g.add_output(g.matmul(x, g.relu(w)));
    EXPECT_EQ(count_op(fuse_shared_input_matmul(g), "concat"), 0u);
  }
  {  // x on the right-hand side
    Graph g;
    Value x = g.input("x", Shape::of({8, 8}));
    g.add_output(g.matmul(g.param("a", Shape::of({8, 8})), x));
    g.add_output(g.matmul(g.param("b", Shape::of({8, 8})), x));
    EXPECT_EQ(count_op(fuse_shared_input_matmul(g), "concat"), 0u);
  }
}

}  // namespace
}  // namespace rlx
