// The production pipeline: optimized vs unoptimized numbers on real models and 200 random
// graphs, the per-pass report, disabled passes and the attention threshold variable.
#include <cstdlib>
#include <random>

#include "models/transformer.h"
#include "passes/pass_test_util.h"
#include "passes/canonical.h"
#include "passes/fusion.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"

namespace rlx {
namespace {

using testing::compare_configs;
using testing::count_op;
using testing::RunConfig;

CompileOptions optimized() { return CompileOptions{}; }

::testing::AssertionResult optimized_matches(const Graph& g, double rtol = 1e-5, testing::ParityOptions po = {}) {
  RunConfig a{"unoptimized", Device::Cpu, testing::unoptimized(), {}};
  RunConfig b{"optimized", Device::Cpu, optimized(), {}};
  po.tolerance = [rtol](DType t) {
    auto tol = testing::parity_tolerance(t);
    // Relative to the output's scale (values of order 1): a fused matmul sums in another order,
    // so elements near zero differ by a few ulps of the larger terms.
    if (t == DType::F32) tol = {rtol, rtol};
    return tol;
  };
  auto r = compare_configs(g, a, b, po);
  if (r.pass) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.text;
}

Graph optimize_cpu(const Graph& g, CompileOptions o = {}) {
  auto be = make_backend(Device::Cpu, o);
  return passes::optimize_for_backend(g, *be, o);
}

Graph bert_graph(int64_t seq, int layers = 1) {
  Graph g;
  Value h = g.input("hidden", Shape::of({1, seq, 64}));
  Value m = g.input("mask", Shape::of({1, seq}));
  models::BertLayerConfig c;
  c.hidden = 64;
  c.num_heads = 4;
  c.ffn = 128;
  for (int i = 0; i < layers; ++i) h = models::build_bert_layer(g, h, m, c, "l" + std::to_string(i));
  g.add_output(h);
  return g;
}

TEST(Pipeline, BertLayerFusesToOneOpAndKeepsNumbers) {
  Graph g = bert_graph(16, 2);
  Graph o = optimize_cpu(g);
  EXPECT_EQ(count_op(o, "fused_transformer_layer"), 2u);
  EXPECT_EQ(passes::op_count(o), 2u);
  EXPECT_TRUE(optimized_matches(g));
}

TEST(Pipeline, LongBertSequenceKeepsAttentionUnfused) {
  Graph g = bert_graph(80);  // 80 > 64: no attention block, the rest still fuses
  Graph o = optimize_cpu(g);
  EXPECT_EQ(count_op(o, "fused_attention_block"), 0u);
  EXPECT_EQ(count_op(o, "fused_residual_ln"), 2u);
  EXPECT_EQ(count_op(o, "fused_matmul_bias_act"), 4u);
  EXPECT_TRUE(optimized_matches(g));
}

TEST(Pipeline, LlamaBlock) {
  models::TransformerDemoConfig c;
  c.seq = 12;
  c.hidden = 64;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.bert_layers = 0;
  c.llama_layers = 2;
  Graph g = models::build_transformer_block_graph(c);
  Graph o = optimize_cpu(g);
  EXPECT_EQ(count_op(o, "fused_swiglu"), 2u);
  // Per layer: fused qkv, o, fused up|gate, down; the residual adds after o and down are fused
  // into their products (fuse_matmul_residual), except the last one, whose sum feeds the final
  // RmsNorm alone and so becomes a FusedResidualRmsNorm.
  EXPECT_EQ(count_op(o, "matmul") + count_op(o, "fused_matmul_bias_act"), 2u * 4u);
  size_t residual = 0;
  for (const Node& n : o.nodes())
    if (const auto* f = std::get_if<ops::FusedMatMulBiasAct>(&n.op); f && f->residual) ++residual;
  EXPECT_EQ(residual, count_op(o, "fused_matmul_bias_act"));
  EXPECT_EQ(residual, 3u);
  EXPECT_EQ(count_op(o, "fused_residual_rms_norm"), 1u);
  testing::ParityOptions po;
  po.fixed_inputs = {{"positions", Tensor::i64({12}, std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})}};
  EXPECT_TRUE(optimized_matches(g, 1e-5, po));
}

TEST(Pipeline, DisabledPassesAndUnknownNames) {
  CompileOptions o;
  o.disabled_passes = {"fuse_transformer_layer", "fuse_attention_block"};
  Graph g = optimize_cpu(bert_graph(8), o);
  EXPECT_EQ(count_op(g, "fused_transformer_layer"), 0u);
  EXPECT_EQ(count_op(g, "fused_residual_ln"), 2u);
  CompileOptions bad;
  bad.disabled_passes = {"fuse_everything"};
  const std::string msg = testing::error_message([&] { Session(Device::Cpu).compile(bert_graph(8), bad); });
  EXPECT_NE(msg.find("unknown pass 'fuse_everything'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fuse_swiglu"), std::string::npos) << msg;
  bad.disabled_passes = {"legalize"};
  EXPECT_THROW(Session(Device::Cpu).compile(bert_graph(8), bad), Error);
  ::setenv("RLX_DISABLE_PASSES", "fuse_transformer_layer, fuse_attention_block", 1);
  Graph e = optimize_cpu(bert_graph(8));
  ::setenv("RLX_DISABLE_PASSES", "fuse_nothing", 1);
  const std::string env_msg = testing::error_message([&] { optimize_cpu(bert_graph(8)); });
  ::unsetenv("RLX_DISABLE_PASSES");
  EXPECT_EQ(count_op(e, "fused_transformer_layer") + count_op(e, "fused_attention_block"), 0u);
  EXPECT_NE(env_msg.find("RLX_DISABLE_PASSES: unknown pass 'fuse_nothing'"), std::string::npos) << env_msg;
}

TEST(Pipeline, AttentionThresholdFromEnvironment) {
  ::setenv("RLX_FUSE_ATTN_THRESHOLD", "8", 1);
  Graph o = optimize_cpu(bert_graph(16));
  ::setenv("RLX_FUSE_ATTN_THRESHOLD", "nope", 1);
  const std::string msg = testing::error_message([&] { optimize_cpu(bert_graph(16)); });
  ::unsetenv("RLX_FUSE_ATTN_THRESHOLD");
  EXPECT_EQ(count_op(o, "fused_attention_block") + count_op(o, "fused_transformer_layer"), 0u);
  EXPECT_NE(msg.find("RLX_FUSE_ATTN_THRESHOLD"), std::string::npos);
}

TEST(Pipeline, PassReport) {
  auto be = make_backend(Device::Cpu, {});
  passes::PassContext ctx;
  std::vector<passes::PassStat> stats;
  passes::PassManager pm;
  pm.add({"cse", passes::cse, {}}).add({"fuse_swiglu", passes::fuse_swiglu, {"fused_swiglu"}});
  struct NoSwiglu final : Backend {
    Device device() const override { return Device::Cpu; }
    bool claims_kind(std::string_view k) const override { return k != "fused_swiglu"; }
    std::unique_ptr<Variant> prepare(Graph, const CompileOptions&) override { return nullptr; }
  } nos;
  ctx.backend = &nos;
  pm.set_verify(true);
  pm.run(bert_graph(8), ctx, &stats);
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_FALSE(stats[0].skipped);
  EXPECT_TRUE(stats[1].skipped);
  const std::string text = passes::format_report(stats);
  EXPECT_NE(text.find("backend does not claim fused_swiglu"), std::string::npos) << text;
  EXPECT_NE(text.find("total"), std::string::npos);
  // The compile-time report goes to stderr.
  ::testing::internal::CaptureStderr();
  CompileOptions o;
  o.pass_report = true;
  Session(Device::Cpu).compile(bert_graph(8), o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (const auto& name : passes::pipeline_pass_names()) EXPECT_NE(err.find(name), std::string::npos) << name;
}

// Random elementwise/matmul graphs: optimized == unoptimized.
Graph random_graph(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  Graph g;
  const int64_t rows = 3, width = 8;
  std::vector<Value> vals{g.input("x", Shape::of({rows, width})), g.input("y", Shape::of({rows, width}))};
  const int n_ops = 4 + static_cast<int>(pick(14));
  int params = 0;
  auto param = [&](std::vector<int64_t> d) { return g.param("p" + std::to_string(params++), Shape::from(d)); };
  for (int i = 0; i < n_ops; ++i) {
    const Value a = vals[pick(vals.size())], b = vals[pick(vals.size())];
    Value r;
    switch (pick(9)) {
      case 0: r = g.binary(std::array{BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Max}[pick(4)], a, b); break;
      case 1: r = g.act(std::array{ActKind::Relu, ActKind::Silu, ActKind::Gelu, ActKind::Tanh, ActKind::Sigmoid}[pick(5)], a); break;
      case 2: r = g.matmul(a, param({width, width})); break;
      case 3: r = g.add(g.matmul(a, param({width, width})), param({width})); break;
      case 4: r = g.add(a, param({width})); break;
      case 5: r = g.where(g.compare(CompareKind::Gt, a, b), a, g.mul(b, g.scalar(0.5))); break;
      case 6: r = g.layer_norm(g.add(a, b), param({width}), param({width})); break;
      case 7: r = g.mul(g.narrow(g.concat({a, b}, 1), 1, 0, width), g.silu(g.narrow(g.concat({a, b}, 1), 1, width, width))); break;
      default: r = g.softmax(a, -1); break;
    }
    vals.push_back(r);
  }
  // One to three outputs, including possibly intermediate values.
  const size_t n_out = 1 + pick(3);
  for (size_t i = 0; i < n_out; ++i) g.add_output(vals[vals.size() - 1 - pick(std::min<size_t>(vals.size() - 2, 4))]);
  return g;
}

TEST(Pipeline, TwoHundredRandomGraphs) {
  int fused_any = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Graph g = random_graph(seed);
    Graph o = optimize_cpu(g);
    fused_any += passes::op_count(o) < passes::op_count(g);
    testing::ParityOptions po;
    po.seed = seed;
    ASSERT_TRUE(optimized_matches(g, 1e-5, po)) << "seed " << seed << "\n" << g.to_text();
  }
  EXPECT_GT(fused_any, 100);  // the generator really exercises the fusions
}

}  // namespace
}  // namespace rlx
