// fuse_matmul_bias_act, fuse_swiglu_dual_matmul, fuse_shared_input_matmul: firing, near misses,
// unchanged numbers.
#include "passes/fusion.h"
#include "passes/pass_test_util.h"

namespace rlx {
namespace {

using passes::fuse_matmul_bias_act;
using passes::fuse_matmul_residual;
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

// ---- fuse_matmul_residual ----

// Pre-norm residual: h = x + proj(norm(x)); h feeds the next block and the output.
TEST(FuseMatMulResidual, FusesPreNormResidualAdd) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3, 8}));
  Value n = g.rms_norm(x, g.param("g", Shape::of({8})));
  Value h = g.add(x, g.matmul(n, g.param("w", Shape::of({8, 8}))));
  g.add_output(g.relu(h));
  g.add_output(h);  // the sum has two users: fine, only the product is absorbed
  Graph f = fuse_matmul_residual(g);
  EXPECT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);
  EXPECT_EQ(count_op(f, "matmul") + count_op(f, "binary"), 0u);
  const Node& fused = f.node(f.outputs()[1].node);
  const auto& op = std::get<ops::FusedMatMulBiasAct>(fused.op);
  EXPECT_TRUE(op.residual);
  EXPECT_FALSE(op.has_bias(fused.inputs.size()));
  EXPECT_EQ(fused.inputs.size(), 3u);
  EXPECT_TRUE(same_numbers(g, pass_fn(fuse_matmul_residual)));
}

TEST(FuseMatMulResidual, KeepsBiasAndActivationOfAFusedProduct) {
  // residual + gelu(x @ w + b): the activation comes before the residual add.
  Mlp m = mlp();
  Value r = m.g.input("r", Shape::of({2, 5, 6}));
  m.g.add_output(m.g.add(m.g.gelu(m.add), r));
  auto both = [](const Graph& g) { return fuse_matmul_residual(fuse_matmul_bias_act(g)); };
  Graph f = both(m.g);
  EXPECT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);
  EXPECT_EQ(count_op(f, "binary") + count_op(f, "activation") + count_op(f, "matmul"), 0u);
  const Node& fused = f.node(f.outputs()[0].node);
  const auto& op = std::get<ops::FusedMatMulBiasAct>(fused.op);
  EXPECT_TRUE(op.residual);
  EXPECT_EQ(op.activation, ActKind::Gelu);
  EXPECT_TRUE(op.has_bias(fused.inputs.size()));
  EXPECT_TRUE(same_numbers(m.g, both));
}

TEST(FuseMatMulResidual, NearMisses) {
  {  // the residual broadcasts (rank 1): that is a bias, not a residual
    Graph g;
    Value x = g.input("x", Shape::of({4, 8}));
    g.add_output(g.add(g.matmul(x, g.param("w", Shape::of({8, 3}))), g.param("b", Shape::of({3}))));
    EXPECT_EQ(count_op(fuse_matmul_residual(g), "fused_matmul_bias_act"), 0u);
  }
  {  // the product grows by broadcasting against the other operand
    Graph g;
    Value x = g.input("x", Shape::of({1, 8}));
    Value r = g.input("r", Shape::of({4, 3}));
    g.add_output(g.add(g.matmul(x, g.param("w", Shape::of({8, 3}))), r));
    EXPECT_EQ(count_op(fuse_matmul_residual(g), "fused_matmul_bias_act"), 0u);
  }
  {  // the product has a second user
    Graph g;
    Value x = g.input("x", Shape::of({4, 8}));
    Value mm = g.matmul(x, g.param("w", Shape::of({8, 8})));
    g.add_output(g.add(mm, x));
    g.add_output(g.relu(mm));
    EXPECT_EQ(count_op(fuse_matmul_residual(g), "fused_matmul_bias_act"), 0u);
  }
  {  // the product is a graph output
    Graph g;
    Value x = g.input("x", Shape::of({4, 8}));
    Value mm = g.matmul(x, g.param("w", Shape::of({8, 8})));
    g.add_output(g.add(mm, x));
    g.add_output(mm);
    EXPECT_EQ(count_op(fuse_matmul_residual(g), "fused_matmul_bias_act"), 0u);
  }
  {  // x + x is not a residual add; subtraction is not an add
    Graph g;
    Value x = g.input("x", Shape::of({4, 8}));
    Value mm = g.matmul(x, g.param("w", Shape::of({8, 8})));
    g.add_output(g.sub(x, mm));
    EXPECT_EQ(count_op(fuse_matmul_residual(g), "fused_matmul_bias_act"), 0u);
  }
}

TEST(FuseMatMulResidual, ResidualAttributeIsValidated) {
  Graph g;
  Value x = g.input("x", Shape::of({4, 8}));
  Value w = g.param("w", Shape::of({8, 3}));
  ops::FusedMatMulBiasAct f;
  f.residual = true;
  EXPECT_THROW(g.add_node(f, {x, w}), Error);                                      // residual missing
  EXPECT_THROW(g.add_node(f, {x, w, g.input("r", Shape::of({4, 4}))}), Error);     // wrong shape
  EXPECT_THROW(g.add_node(f, {x, w, g.input("h", Shape::of({4, 3}, DType::F16))}), Error);  // wrong dtype
  EXPECT_NO_THROW(g.add_node(f, {x, w, g.param("b", Shape::of({3})), g.input("ok", Shape::of({4, 3}))}));
}

}  // namespace
}  // namespace rlx
