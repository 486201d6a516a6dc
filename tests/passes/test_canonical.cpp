// Rewriter, dce, cse, fold_constants, remove_trivial_ops, lowering passes.
#include "passes/canonical.h"
#include "passes/lower.h"
#include "passes/pass_test_util.h"
#include "passes/rewriter.h"

namespace rlx {
namespace {

using namespace passes;
using testing::count_op;
using testing::pass_fn;
using testing::same_numbers;

TEST(Rewriter, MapsOperandsDeclaredLaterAndKeepsInterface) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3}));
  Value unused = g.input("unused", Shape::of({1}));
  (void)unused;
  Value late = g.param("late", Shape::of({3}));
  Value y = g.add(x, late);
  g.add_output(y, "y");
  Rewriter rw(g);
  // Emit y first: its operands are copied on demand, once.
  const Value ny = rw.map(y);
  EXPECT_EQ(rw.map(y), ny);
  rw.copy(y.node);  // idempotent
  Graph out = rw.finish();
  EXPECT_EQ(out.input_nodes().size(), 2u);
  EXPECT_EQ(out.param_nodes().size(), 1u);
  EXPECT_EQ(out.output_names(), std::vector<std::string>{"y"});
  EXPECT_TRUE(out.verify_report().empty());
  EXPECT_EQ(count_op(out, "binary"), 1u);
}

TEST(Rewriter, AbsorbedNodeStillCopiedWhenSomethingNeedsIt) {
  Graph g;
  Value x = g.input("x", Shape::of({4}));
  Value a = g.relu(x);
  g.add_output(g.exp(a));
  Graph out = rewrite_each(g, [](Rewriter& rw, const Node& n) {
    if (std::holds_alternative<ops::Activation>(n.op) && n.id == 1) {
      rw.absorb(n.id);
      return true;
    }
    return false;
  });
  EXPECT_EQ(count_op(out, "activation"), 2u);  // the exp still needs relu: copied on demand
  EXPECT_TRUE(out.verify_report().empty());
}

TEST(Dce, RemovesDeadKeepsLeaves) {
  Graph g;
  Value x = g.input("x", Shape::of({4}));
  g.param("p", Shape::of({4}));
  g.exp(x);  // dead
  g.add_output(g.relu(x));
  Graph out = dce(g);
  EXPECT_EQ(op_count(out), 1u);
  EXPECT_EQ(out.param_nodes().size(), 1u);
}

TEST(Cse, MergesEqualNodesOnly) {
  Graph g;
  Value x = g.input("x", Shape::of({3, 4}));
  Value w = g.param("w", Shape::of({4, 4}));
  Value a = g.matmul(x, w), b = g.matmul(x, w);
  Value s1 = g.softmax(a, -1), s2 = g.softmax(b, 0);  // different attributes
  Value c1 = g.constant(Tensor::scalar_f32(2)), c2 = g.constant(Tensor::scalar_f32(2)), c3 = g.constant(Tensor::scalar_f32(3));
  g.add_output(g.add(g.mul(s1, c1), g.mul(s2, c2)));
  g.add_output(g.mul(s1, c3));
  Graph out = dce(cse(g));
  EXPECT_EQ(count_op(out, "matmul"), 1u);
  EXPECT_EQ(count_op(out, "softmax"), 2u);
  EXPECT_EQ(count_op(out, "constant"), 2u);
  EXPECT_TRUE(same_numbers(g, [](const Graph& x) { return cse(x); }));
}

TEST(FoldConstants, EvaluatesWithCpuKernels) {
  Graph g;
  Value x = g.input("x", Shape::of({3}));
  Value c = g.constant(Tensor::f32({3}, std::vector<float>{1, 2, 3}));
  Value folded = g.exp(g.mul(c, c));  // constant subgraph
  g.add_output(g.add(x, folded));
  Graph out = dce(fold_constants(g));
  EXPECT_EQ(count_op(out, "activation"), 0u);
  EXPECT_EQ(count_op(out, "binary"), 1u);
  EXPECT_TRUE(same_numbers(g, pass_fn(fold_constants)));
}

TEST(FoldConstants, KeepsBigExpansionsAndRuntimeErrors) {
  Graph g;
  Value one = g.constant(Tensor::scalar_f32(1));
  Value big = g.expand(one, {1024, 1024});  // 4 MiB from 4 bytes: not materialized
  Value idx = g.constant(Tensor::i64({1}, std::vector<int64_t>{7}));
  Value bad = g.gather(g.constant(Tensor::f32({2}, std::vector<float>{1, 2})), idx, 0);  // out of range
  g.add_output(big);
  g.add_output(bad);
  Graph out = fold_constants(g);
  EXPECT_EQ(count_op(out, "expand"), 1u);
  EXPECT_EQ(count_op(out, "gather"), 1u);
}

TEST(RemoveTrivialOps, RemovesIdentitiesOnly) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3}));
  Value y = g.reshape(x, {2, 3});
  y = g.transpose(g.transpose(y, {1, 0}), {1, 0});
  y = g.cast(y, DType::F32);
  y = g.mul(y, g.constant(Tensor::scalar_f32(1)));
  y = g.add(y, g.constant(Tensor::scalar_f32(-0.0f)));  // x + (-0.0) is x, even for x = -0.0
  y = g.sub(y, g.constant(Tensor::scalar_f32(0)));      // x - (+0.0) is x
  y = g.stop_gradient(y);
  g.add_output(y, "same");
  // near misses: a broadcasting x*1 grows the shape, x*2 is not neutral
  g.add_output(g.mul(g.narrow(x, 0, 0, 1), g.constant(Tensor::f32({2, 1}, std::vector<float>{1, 1}))), "grow");
  g.add_output(g.mul(x, g.constant(Tensor::scalar_f32(2))), "twice");
  Graph out = dce(remove_trivial_ops(dce(remove_trivial_ops(g))));
  EXPECT_EQ(count_op(out, "reshape") + count_op(out, "cast") + count_op(out, "stop_gradient"), 0u);
  EXPECT_EQ(count_op(out, "transpose"), 0u);
  EXPECT_EQ(count_op(out, "binary"), 2u);
  EXPECT_EQ(out.outputs()[0], (Value{out.input_nodes()[0], 0}));  // "same" is x itself
  EXPECT_TRUE(same_numbers(g, pass_fn(remove_trivial_ops)));
}

TEST(RemoveTrivialOps, MergesReshapeChainsAndTransposes) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3, 4}));
  Value r = g.reshape(g.reshape(x, {6, 4}), {4, 6});
  Value t = g.transpose(g.transpose(x, {1, 2, 0}), {2, 0, 1});  // = identity
  Value u = g.transpose(g.transpose(x, {1, 0, 2}), {0, 2, 1});
  g.add_output(r);
  g.add_output(t);
  g.add_output(u);
  Graph out = dce(remove_trivial_ops(g));
  EXPECT_EQ(count_op(out, "reshape"), 1u);
  EXPECT_EQ(count_op(out, "transpose"), 1u);
  EXPECT_TRUE(same_numbers(g, pass_fn(remove_trivial_ops)));
}

TEST(LowerDotGeneral, BecomesMatmul) {
  Graph g;
  Value a = g.input("a", Shape::of({2, 5, 3, 4}));  // batch 0, contract {1}, free {2, 3}
  Value b = g.input("b", Shape::of({2, 6, 5}));     // batch 0, contract {2}, free {1}
  ops::DotGeneral d{.lhs_batch = {0}, .rhs_batch = {0}, .lhs_contract = {1}, .rhs_contract = {2}};
  g.add_output(g.dot_general(a, b, d));
  Graph out = lower_dot_general(g);
  EXPECT_EQ(count_op(out, "dot_general"), 0u);
  EXPECT_EQ(count_op(out, "matmul"), 1u);
  EXPECT_EQ(out.shape(out.outputs()[0]).concrete(), (std::vector<int64_t>{2, 3, 4, 6}));
  EXPECT_TRUE(same_numbers(g, pass_fn(lower_dot_general)));
}

TEST(LowerControlFlow, InlinesConstantIf) {
  auto branch = [](bool add) {
    auto b = std::make_shared<Graph>();
    Value v = b->input("v", Shape::of({3}));
    b->add_output(add ? b->add(v, v) : b->mul(v, v));
    return b;
  };
  for (bool cond : {true, false}) {
    Graph g;
    Value x = g.input("x", Shape::of({3}));
    Value c = g.constant(Tensor::boolean({}, std::vector<uint8_t>{cond}));
    ops::If op;
    op.then_branch = branch(true);
    op.else_branch = branch(false);
    g.add_output(g.apply(op, {c, x}));
    Graph out = lower_control_flow(g);
    EXPECT_EQ(count_op(out, "if"), 0u);
    EXPECT_TRUE(same_numbers(g, pass_fn(lower_control_flow)));
  }
}

}  // namespace
}  // namespace rlx
