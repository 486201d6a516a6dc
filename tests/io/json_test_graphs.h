#pragma once
// Graphs for the graph-JSON tests: one that exercises every op kind of rlx::Op (control flow
// subgraphs and an ElementwiseRegion included), and a small runnable one with weights.
#include <limits>
#include <memory>
#include <set>
#include <vector>

#include "support/test_util.h"

namespace rlx::json_test {

inline Tensor f32_values(std::vector<int64_t> shape, float start, float step) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<float>(i);
  return Tensor::f32(std::move(shape), v);
}

// then: x * constant; else: x (passed through).
inline std::pair<SubgraphPtr, SubgraphPtr> scale_or_identity(const Shape& s) {
  auto t = std::make_shared<Graph>();
  const Value x = t->input("x", s);  // node 0
  t->add_output(t->mul(x, t->constant(f32_values({8}, 0.5f, 0.25f))), "scaled");
  auto e = std::make_shared<Graph>();
  e->add_output(e->input("x", s), "same");
  return {t, e};
}

// Every op kind: builds each node through the public builder (so shapes are inferred).
inline Graph all_ops_graph() {
  Graph g;
  const Shape s248 = Shape::of({2, 4, 8});
  const Value x = g.input("x", s248);
  const Value w = g.param("w", Shape::of({8, 8}));
  const Value c = g.constant(f32_values({8}, -1.0f, 0.25f));
  const Value offset = g.input("offset", Shape({}, DType::I64));
  const Value flag = g.input("flag", Shape({}, DType::Bool));
  const Value sym = g.input("sym", Shape({Dim::symbol("batch"), Dim(8)}));

  // elementwise
  const Value sum = g.add(x, c);
  const Value gt = g.compare(CompareKind::Gt, x, c);
  const Value sel = g.where(gt, x, sum);
  g.act(ActKind::GeluApprox, sel);
  g.cast(x, DType::F16);
  g.act(ActKind::Relu, sym);
  // shape
  g.reshape(x, {Dim(2), Dim(-1)});
  g.transpose(x, {0, 2, 1});
  g.narrow(x, -1, 2, 4);
  g.concat({x, x}, 1);
  g.expand(c, {Dim(4), Dim(8)});
  g.reverse(x, {0, -1});
  g.stop_gradient(x);
  // indexing
  const Value idx = g.constant(Tensor::i64({3}, std::vector<int64_t>{0, 3, -1}));
  g.gather(x, idx, 1);
  std::vector<int64_t> scatter_idx(16);
  for (size_t i = 0; i < scatter_idx.size(); ++i) scatter_idx[i] = static_cast<int64_t>(i % 4);
  g.scatter_add(x, g.constant(Tensor::i64({2, 1, 8}, scatter_idx)), g.constant(f32_values({2, 1, 8}, 1.0f, 1.0f)), 1);
  g.cache_write(x, g.narrow(x, 1, 0, 2), g.constant(Tensor::i64({2}, std::vector<int64_t>{3, 0})));
  g.apply(ops::ArgMax{.axis = -1, .keep_dims = true, .select_last = true}, {x});
  g.argmin(x, 1);
  g.apply_multi(ops::TopK{.k = 3, .axis = -1, .largest = false}, {x});
  g.cumsum(x, 1, true, true);
  // contraction / reductions
  g.matmul(x, w);
  ops::DotGeneral dims;
  dims.lhs_contract = {2};
  dims.rhs_contract = {0};
  g.dot_general(x, w, dims);
  g.reduce(ReduceKind::Max, x, {1, -1}, true);
  g.softmax(x, 1);
  g.log_softmax(x);
  // norms
  g.layer_norm(x, c, c, 1e-3);
  g.rms_norm(x, c);
  const Value x4 = g.reshape(x, {Dim(2), Dim(4), Dim(2), Dim(4)});  // N, C, H, W
  const Value g4 = g.constant(f32_values({4}, 1.0f, 0.5f));
  const Value var4 = g.constant(f32_values({4}, 0.5f, 0.25f));
  g.apply(ops::GroupNorm{.groups = 2, .eps = 1e-4}, {x4, g4, g4});
  g.apply(ops::LayerNorm2d{.eps = 1e-5}, {x4, g4, g4});
  g.apply(ops::BatchNormInference{.eps = 1e-3}, {x4, g4, g4, g4, var4});
  // transformer: x4 also reads as (B, S, H, D) = (2, 4, 2, 4)
  const Value cs = g.constant(f32_values({4, 2}, 0.1f, 0.1f));
  g.rope(x4, cs, cs, 4, 4, RopeStyle::GptJ);
  g.attention(x4, x4, x4, std::nullopt,
              ops::Attention{.num_heads = 2, .num_kv_heads = 2, .head_dim = 4, .mask_kind = MaskKind::SlidingWindow,
                             .window = 2, .score_scale = 0.5, .softcap = 30.0, .layout = AttnLayout::BSHD});
  g.attention(x4, x4, x4, g.constant(Tensor::i64({4}, std::vector<int64_t>{0, 2, -1, 3})),
              ops::Attention{.num_heads = 2, .num_kv_heads = 2, .head_dim = 4, .mask_kind = MaskKind::Positions});
  // vision
  g.apply(ops::Conv{.stride = {1, 1}, .pads = {0, 1, 0, 1}, .dilation = {1, 1}, .groups = 2},
          {x4, g.constant(f32_values({6, 2, 1, 3}, 0.0f, 0.01f)), g.constant(f32_values({6}, 0.0f, 1.0f))});
  g.apply(ops::ConvTranspose{.stride = {2, 2}, .pads = {0, 0, 0, 0}, .dilation = {1, 1}, .output_padding = {1, 1},
                             .groups = 1},
          {x4, g.constant(f32_values({4, 3, 2, 2}, 0.0f, 0.01f))});
  g.apply(ops::Pool{.kind = PoolKind::Avg, .kernel = {2, 2}, .stride = {2, 2}, .pads = {0, 0, 0, 0},
                    .dilation = {1, 1}, .count_include_pad = true, .ceil_mode = true},
          {x4});
  g.apply(ops::Resize{.mode = ResizeMode::Linear, .coord = ResizeCoord::AlignCorners, .nearest = NearestRound::Floor,
                      .scales = {1, 1, 2, 2}, .sizes = {}},
          {x4});
  g.apply(ops::Resize{.mode = ResizeMode::Nearest, .scales = {}, .sizes = {2, 4, 3, 5}}, {x4});
  g.apply(ops::Pad{.mode = PadMode::Reflect, .pads = {0, 1, 1, 0, 1, 1}}, {x});
  g.apply(ops::Pad{.mode = PadMode::Constant, .pads = {0, 0, 1, 0, 0, 2},
                   .value = -std::numeric_limits<double>::infinity()},
          {x});
  g.apply(ops::Im2Col{.kernel = {2, 2}, .stride = {1, 1}, .pads = {0, 0, 0, 0}, .dilation = {1, 1}}, {x4});
  // random
  g.apply(ops::RngUniform{.shape = Shape({3, 4}, DType::F16), .low = -1.0, .high = 2.0,
                          .seed = std::numeric_limits<uint64_t>::max()},
          {offset});
  g.apply(ops::RngNormal{.shape = Shape({5}, DType::BF16), .mean = 1.0, .stddev = 3.0, .seed = 7}, {});
  g.apply(ops::Sample{.top_k = 5, .top_p = 0.9, .temperature = 0.7, .seed = 3}, {g.reshape(x, {Dim(8), Dim(8)}), offset});
  // control flow: If at top level, and a While whose body holds another If
  auto [then_b, else_b] = scale_or_identity(s248);
  const Value chosen = g.apply(ops::If{then_b, else_b}, {flag, x});
  auto cond = std::make_shared<Graph>();
  {
    const Value i = cond->input("i", Shape({}, DType::I64));
    cond->input("v", s248);
    cond->add_output(cond->compare(CompareKind::Lt, i, cond->scalar(3, DType::I64)));
  }
  auto body = std::make_shared<Graph>();
  {
    const Value i = body->input("i", Shape({}, DType::I64));
    const Value v = body->input("v", s248);
    const Value odd = body->compare(CompareKind::Eq, body->binary(BinaryKind::Mod, i, body->scalar(2, DType::I64)),
                                    body->scalar(1, DType::I64));
    body->add_output(body->add(i, body->scalar(1, DType::I64)));
    body->add_output(body->apply(ops::If{then_b, else_b}, {odd, v}));
  }
  g.apply_multi(ops::While{.max_iterations = 10, .cond = cond, .body = body}, {g.scalar(0, DType::I64), chosen});
  // fused
  g.apply(ops::FusedMatMulBiasAct{.activation = ActKind::Silu}, {x, w, c});
  g.apply(ops::FusedMatMulBiasAct{}, {x, w});
  g.apply(ops::FusedResidualLN{.has_bias = true, .eps = 1e-4}, {x, x, c, c});
  g.apply(ops::FusedResidualRmsNorm{.has_bias = false, .eps = 1e-6}, {x, x, c});
  g.apply(ops::FusedSwiGLU{.gate_first = true}, {x});
  const Value qkv_w = g.param("qkv_w", Shape::of({8, 24}));
  const Value qkv_b = g.constant(f32_values({24}, 0.0f, 0.1f));
  const Value mask = g.input("mask", Shape::of({2, 4}));
  g.apply(ops::FusedAttentionBlock{.num_heads = 2, .head_dim = 4, .has_bias = true, .has_rope = false},
          {x, qkv_w, w, mask, qkv_b, c});
  const Value fc1_w = g.constant(f32_values({8, 16}, 0.0f, 0.01f));
  const Value fc1_b = g.constant(f32_values({16}, 0.0f, 0.1f));
  const Value fc2_w = g.constant(f32_values({16, 8}, 0.0f, 0.01f));
  g.apply(ops::FusedTransformerLayer{.num_heads = 2, .head_dim = 4, .eps = 1e-12, .activation = ActKind::Relu},
          {x, qkv_w, qkv_b, w, c, c, c, fc1_w, fc1_b, fc2_w, c, c, c, mask});
  using Step = ops::RegionStep;
  g.apply(ops::ElementwiseRegion{.steps = {
              Step{RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Add), DType::F32, {0, 1}},
              Step{RegionStepKind::Activation, static_cast<int32_t>(ActKind::Tanh), DType::F32, {-1}},
              Step{RegionStepKind::Compare, static_cast<int32_t>(CompareKind::Ge), DType::F32, {-2, 1}},
              Step{RegionStepKind::Cast, 0, DType::F16, {-2}},
              Step{RegionStepKind::Cast, 0, DType::F32, {-4}},
              Step{RegionStepKind::Where, 0, DType::F32, {-3, -5, 0}},
          }},
          {x, c});
  g.apply(ops::LoraMatMul{.scale = 0.5},
          {x, w, g.constant(f32_values({8, 2}, 0.0f, 0.1f)), g.constant(f32_values({2, 8}, 0.0f, 0.1f))});
  const Value u8x = g.constant(Tensor::zeros(DType::U8, {1, 2, 4, 4}));
  const Value u8zero = g.constant(Tensor::zeros(DType::U8, {}));
  const Value i8w = g.constant(Tensor::zeros(DType::I8, {3, 2, 3, 3}));
  g.apply(ops::MatMulInteger{}, {g.reshape(u8x, {Dim(4), Dim(8)}), g.reshape(u8x, {Dim(8), Dim(4)}), u8zero, u8zero});
  g.apply(ops::ConvInteger{.stride = {1, 2}, .pads = {1, 1, 0, 1}, .dilation = {1, 1}, .groups = 1},
          {u8x, i8w, u8zero, g.constant(Tensor::zeros(DType::I8, {3}))});
  g.apply(ops::DequantMatMul{.format = QuantFormat::Q4_1, .k = 32},
          {g.reshape(x, {Dim(2), Dim(32)}), g.constant(Tensor::zeros(DType::U8, {3, 20}))});
  // A bidirectional GRU over x as (seq 2, batch 4, input 8), with biases and per-direction activations.
  g.apply_multi(ops::Recurrent{.cell = RnnCell::Gru, .direction = RnnDirection::Bidirectional, .hidden_size = 3,
                               .activations = {ActKind::Sigmoid, ActKind::Tanh, ActKind::Relu, ActKind::Tanh},
                               .clip = 2.5, .linear_before_reset = true, .has_bias = true},
                {x, g.constant(f32_values({2, 9, 8}, -0.5f, 0.01f)), g.constant(f32_values({2, 9, 3}, 0.5f, -0.02f)),
                 g.constant(f32_values({2, 18}, 0.0f, 0.05f))});
  g.apply(ops::GroupedMatMul{}, {g.reshape(x, {Dim(8), Dim(8)}), g.constant(f32_values({3, 8, 5}, 0.0f, 0.01f)),
                                 g.constant(Tensor::i64({8}, std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}))});

  g.add_output(sum, "sum");
  g.add_output(chosen);
  g.add_output(Value{static_cast<NodeId>(g.size() - 1), 0}, "grouped");
  g.set_weight("w", f32_values({8, 8}, -0.5f, 0.015625f));
  return g;
}

// Distinct op kinds used by `g` and its subgraphs.
inline void collect_kinds(const Graph& g, std::set<size_t>& kinds) {
  for (const Node& n : g.nodes()) {
    kinds.insert(n.op.index());
    if (auto* i = std::get_if<ops::If>(&n.op)) {
      collect_kinds(*i->then_branch, kinds);
      collect_kinds(*i->else_branch, kinds);
    }
    if (auto* w = std::get_if<ops::While>(&n.op)) {
      collect_kinds(*w->cond, kinds);
      collect_kinds(*w->body, kinds);
    }
  }
}

}  // namespace rlx::json_test
