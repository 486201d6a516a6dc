// fuse_attention_block and fuse_transformer_layer on a real BERT layer (models/transformer.h).
#include "models/transformer.h"
#include "passes/fusion.h"
#include "passes/pass_test_util.h"

namespace rlx {
namespace {

using namespace passes;
using testing::count_op;
using testing::same_numbers;

Graph bert(int64_t batch, int64_t seq, bool mask_is_output = false) {
  Graph g;
  Value h = g.input("hidden", Shape::of({batch, seq, 32}));
  Value m = g.input("mask", Shape::of({batch, seq}));
  models::BertLayerConfig c;
  c.hidden = 32;
  c.num_heads = 4;
  c.ffn = 64;
  g.add_output(models::build_bert_layer(g, h, m, c, "l0"), "out");
  if (mask_is_output) g.add_output(m, "mask_copy");
  return g;
}

// The passes before the attention fusion, as in the pipeline.
Graph prefused(const Graph& g) { return fuse_residual_ln(fuse_matmul_bias_act(g)); }

PassContext with_threshold(int64_t t) {
  PassContext c;
  c.attention_threshold = t;
  return c;
}

TEST(FuseAttentionBlock, FiresOnBertAttention) {
  Graph g = bert(1, 8);
  Graph f = fuse_attention_block(prefused(g), with_threshold(64));
  EXPECT_EQ(count_op(f, "fused_attention_block"), 1u);
  EXPECT_EQ(count_op(f, "attention"), 0u);
  EXPECT_EQ(count_op(f, "narrow"), 0u);
  EXPECT_TRUE(same_numbers(g, [](const Graph& x) { return fuse_attention_block(prefused(x), with_threshold(64)); }));
}

TEST(FuseAttentionBlock, ThresholdOnBatchTimesSeq) {
  Graph g = bert(2, 8);  // batch * seq = 16
  EXPECT_EQ(count_op(fuse_attention_block(prefused(g), with_threshold(16)), "fused_attention_block"), 1u);
  EXPECT_EQ(count_op(fuse_attention_block(prefused(g), with_threshold(15)), "fused_attention_block"), 0u);
  EXPECT_EQ(count_op(fuse_attention_block(prefused(g), PassContext{}), "fused_attention_block"), 1u);  // default 64
  EXPECT_EQ(count_op(fuse_attention_block(prefused(bert(1, 128)), PassContext{}), "fused_attention_block"), 0u);
}

TEST(FuseAttentionBlock, NearMisses) {
  {  // q reshape feeds a second consumer
    Graph g;
    Value h = g.input("hidden", Shape::of({1, 4, 8}));
    Value m = g.input("mask", Shape::of({1, 4}));
    Value qkv = g.add(g.matmul(h, g.param("w", Shape::of({8, 24}))), g.param("b", Shape::of({24})));
    auto head = [&](int64_t i) { return g.reshape(g.narrow(qkv, 2, i * 8, 8), {1, 4, 2, 4}); };
    Value q = head(0);
    ops::Attention at{.num_heads = 2, .num_kv_heads = 2, .head_dim = 4, .mask_kind = MaskKind::Custom};
    Value ctx = g.reshape(g.attention(q, head(1), head(2), m, at), {1, 4, 8});
    g.add_output(g.add(g.matmul(ctx, g.param("o", Shape::of({8, 8}))), g.param("ob", Shape::of({8}))));
    g.add_output(q);
    Graph f = fuse_attention_block(fuse_matmul_bias_act(g), with_threshold(64));
    EXPECT_EQ(count_op(f, "fused_attention_block"), 0u);
  }
  {  // a reshape that swaps batch and sequence is not a head split
    Graph g;
    Value h = g.input("hidden", Shape::of({2, 4, 8}));
    Value m = g.input("mask", Shape::of({4, 2}));
    Value qkv = g.matmul(h, g.param("w", Shape::of({8, 24})));
    auto head = [&](int64_t i) { return g.reshape(g.narrow(qkv, 2, i * 8, 8), {4, 2, 2, 4}); };
    ops::Attention at{.num_heads = 2, .num_kv_heads = 2, .head_dim = 4, .mask_kind = MaskKind::Custom};
    Value ctx = g.reshape(g.attention(head(0), head(1), head(2), m, at), {2, 4, 8});
    g.add_output(g.matmul(ctx, g.param("o", Shape::of({8, 8}))));
    EXPECT_EQ(count_op(fuse_attention_block(g, with_threshold(64)), "fused_attention_block"), 0u);
    EXPECT_TRUE(same_numbers(g, [](const Graph& x) { return fuse_attention_block(x, with_threshold(64)); }));
  }
  {  // causal mask instead of key padding
    Graph g;
    Value h = g.input("hidden", Shape::of({1, 4, 8}));
    Value qkv = g.matmul(h, g.param("w", Shape::of({8, 24})));
    auto head = [&](int64_t i) { return g.reshape(g.narrow(qkv, 2, i * 8, 8), {1, 4, 2, 4}); };
    ops::Attention at{.num_heads = 2, .num_kv_heads = 2, .head_dim = 4, .mask_kind = MaskKind::Causal};
    Value ctx = g.reshape(g.attention(head(0), head(1), head(2), std::nullopt, at), {1, 4, 8});
    g.add_output(g.matmul(ctx, g.param("o", Shape::of({8, 8}))));
    EXPECT_EQ(count_op(fuse_attention_block(g, with_threshold(64)), "fused_attention_block"), 0u);
  }
}

TEST(FuseAttentionBlock, WithoutBiases) {
  Graph g;
  Value h = g.input("hidden", Shape::of({1, 4, 8}));
  Value m = g.input("mask", Shape::of({1, 4}));
  Value qkv = g.matmul(h, g.param("w", Shape::of({8, 24})));
  auto head = [&](int64_t i) { return g.reshape(g.narrow(qkv, 2, i * 8, 8), {1, 4, 2, 4}); };
  ops::Attention at{.num_heads = 2, .num_kv_heads = 2, .head_dim = 4, .mask_kind = MaskKind::Custom};
  Value ctx = g.reshape(g.attention(head(0), head(1), head(2), m, at), {1, 4, 8});
  g.add_output(g.matmul(ctx, g.param("o", Shape::of({8, 8}))));
  Graph f = fuse_attention_block(g, with_threshold(64));
  ASSERT_EQ(count_op(f, "fused_attention_block"), 1u);
  EXPECT_FALSE(std::get<ops::FusedAttentionBlock>(f.node(f.outputs()[0].node).op).has_bias);
  EXPECT_TRUE(same_numbers(g, [](const Graph& x) { return fuse_attention_block(x, with_threshold(64)); }));
}

Graph layer_fused(const Graph& g) {
  return fuse_transformer_layer(fuse_attention_block(prefused(g), with_threshold(64)), with_threshold(64));
}

TEST(FuseTransformerLayer, WholeBertLayer) {
  Graph g = bert(1, 8);
  Graph f = layer_fused(g);
  EXPECT_EQ(count_op(f, "fused_transformer_layer"), 1u);
  EXPECT_EQ(passes::op_count(f), 1u);
  const Node& n = f.node(f.outputs()[0].node);
  ASSERT_EQ(n.inputs.size(), 14u);
  EXPECT_EQ(std::get<ops::Input>(f.node(n.inputs[0].node).op).name, "hidden");
  EXPECT_EQ(std::get<ops::Param>(f.node(n.inputs[1].node).op).name, "l0.attn.qkv.weight");
  EXPECT_EQ(std::get<ops::Param>(f.node(n.inputs[2].node).op).name, "l0.attn.qkv.bias");
  EXPECT_EQ(std::get<ops::Param>(f.node(n.inputs[3].node).op).name, "l0.attn.out.weight");
  EXPECT_EQ(std::get<ops::Param>(f.node(n.inputs[7].node).op).name, "l0.ffn.fc1.weight");
  EXPECT_EQ(std::get<ops::Param>(f.node(n.inputs[12].node).op).name, "l0.ln2.bias");
  EXPECT_EQ(std::get<ops::Input>(f.node(n.inputs[13].node).op).name, "mask");
  EXPECT_TRUE(same_numbers(g, layer_fused));
}

TEST(FuseTransformerLayer, NotWhenTheMiddleNormIsAnOutput) {
  Graph g = bert(1, 8);
  // expose h (the first LayerNorm) as an extra output: the layer must not be fused
  Graph pre = fuse_attention_block(prefused(g), with_threshold(64));
  for (const Node& n : pre.nodes())
    if (std::holds_alternative<ops::FusedResidualLN>(n.op)) {
      pre.add_output(Value{n.id, 0}, "h");
      break;
    }
  EXPECT_EQ(count_op(fuse_transformer_layer(pre, with_threshold(64)), "fused_transformer_layer"), 0u);
}

}  // namespace
}  // namespace rlx
