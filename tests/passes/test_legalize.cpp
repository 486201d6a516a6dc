// The shared legalize: every decomposition computes the op's numbers; unclaimed nodes without
// one are reported together.
#include <limits>
#include <set>

#include "passes/legalize.h"
#include "passes/pass_test_util.h"
#include "passes/uses.h"

namespace rlx {
namespace {

using namespace passes;
using testing::count_op;
using testing::same_numbers;

// A backend that runs primitives only: no fused ops, no control flow, no dot_general, no
// group/batch/2d norms, and reductions/softmax/arg/cumsum/norms over the last axis only.
bool primitives_only(const Graph& g, const Node& n) {
  static const std::set<std::string> no{"fused_matmul_bias_act", "fused_residual_ln", "fused_residual_rms_norm",
                                        "fused_swiglu", "fused_attention_block", "fused_transformer_layer",
                                        "elementwise_region", "lora_matmul", "dot_general", "if", "while",
                                        "group_norm", "batch_norm_inference", "layer_norm_2d", "resize", "im2col"};
  if (no.count(op_name(n.op))) return false;
  const int64_t r = n.inputs.empty() ? 0 : g.shape(n.inputs[0]).rank();
  if (const auto* red = std::get_if<ops::Reduce>(&n.op))
    return red->axes.size() == 1 && is_last_axis(red->axes[0], r) && !red->keep_dims;
  auto last = [&](int64_t axis) { return is_last_axis(axis, r); };
  if (const auto* o = std::get_if<ops::Softmax>(&n.op)) return last(o->axis);
  if (const auto* o = std::get_if<ops::LogSoftmax>(&n.op)) return last(o->axis);
  if (const auto* o = std::get_if<ops::Cumsum>(&n.op)) return last(o->axis);
  if (const auto* o = std::get_if<ops::ArgMax>(&n.op)) return last(o->axis) && !o->keep_dims;
  if (const auto* o = std::get_if<ops::ArgMin>(&n.op)) return last(o->axis) && !o->keep_dims;
  if (const auto* o = std::get_if<ops::LayerNorm>(&n.op)) return last(o->axis);
  if (const auto* o = std::get_if<ops::RmsNorm>(&n.op)) return last(o->axis);
  return true;
}

Graph legal(const Graph& g) { return legalize(g, primitives_only, "test"); }

void expect_legalized(const Graph& g, const char* what) {
  Graph l = legal(g);
  for (const Node& n : l.nodes()) EXPECT_TRUE(primitives_only(l, n)) << what << ": " << node_label(n);
  EXPECT_TRUE(same_numbers(g, legal)) << what;
}

std::vector<Dim> dims_of(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

Graph one_op(const Op& op, const std::vector<Shape>& shapes) {
  Graph g;
  std::vector<Value> ins;
  for (size_t i = 0; i < shapes.size(); ++i) ins.push_back(g.input("in" + std::to_string(i), shapes[i]));
  g.add_output(g.apply(op, ins));
  return g;
}

TEST(Legalize, FusedMatmulNormAndSwiglu) {
  expect_legalized(one_op(ops::FusedMatMulBiasAct{.activation = ActKind::Gelu},
                          {Shape::of({2, 3, 4}), Shape::of({4, 5}), Shape::of({5})}), "fmba");
  expect_legalized(one_op(ops::FusedMatMulBiasAct{}, {Shape::of({3, 4}), Shape::of({4, 5})}), "fmba no bias");
  expect_legalized(one_op(ops::FusedResidualLN{.has_bias = true},
                          {Shape::of({2, 6}), Shape::of({2, 6}), Shape::of({6}), Shape::of({6})}), "res ln");
  expect_legalized(one_op(ops::FusedResidualRmsNorm{}, {Shape::of({2, 6}), Shape::of({2, 6}), Shape::of({6})}), "res rms");
  expect_legalized(one_op(ops::FusedSwiGLU{.gate_first = true}, {Shape::of({2, 3, 8})}), "swiglu gate first");
  expect_legalized(one_op(ops::FusedSwiGLU{}, {Shape::of({5, 8})}), "swiglu");
  expect_legalized(one_op(ops::LoraMatMul{.scale = 0.5},
                          {Shape::of({3, 8}), Shape::of({8, 4}), Shape::of({8, 2}), Shape::of({2, 4})}), "lora");
}

TEST(Legalize, AttentionBlockAndTransformerLayer) {
  const Shape h = Shape::of({2, 4, 8});
  expect_legalized(one_op(ops::FusedAttentionBlock{.num_heads = 2, .head_dim = 4},
                          {h, Shape::of({8, 24}), Shape::of({8, 8}), Shape::of({2, 4}), Shape::of({24}), Shape::of({8})}),
                   "attention block");
  expect_legalized(one_op(ops::FusedAttentionBlock{.num_heads = 2, .head_dim = 4, .has_bias = false, .has_rope = true},
                          {h, Shape::of({8, 24}), Shape::of({8, 8}), Shape::of({2, 4}), Shape::of({4, 2}), Shape::of({4, 2})}),
                   "attention block rope");
  std::vector<Shape> s{h, Shape::of({8, 24}), Shape::of({24}), Shape::of({8, 8}), Shape::of({8}), Shape::of({8}),
                       Shape::of({8}), Shape::of({8, 16}), Shape::of({16}), Shape::of({16, 8}), Shape::of({8}),
                       Shape::of({8}), Shape::of({8}), Shape::of({2, 4})};
  expect_legalized(one_op(ops::FusedTransformerLayer{.num_heads = 2, .head_dim = 4, .eps = 1e-5,
                                                     .activation = ActKind::GeluApprox}, s), "transformer layer");
}

TEST(Legalize, RegionDotGeneralAndIf) {
  ops::ElementwiseRegion r;
  r.steps = {{RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Add), DType::F32, {0, 1}},
             {RegionStepKind::Activation, static_cast<int32_t>(ActKind::Silu), DType::F32, {-1}}};
  expect_legalized(one_op(r, {Shape::of({3, 4}), Shape::of({4})}), "region");
  expect_legalized(one_op(ops::DotGeneral{.lhs_batch = {}, .rhs_batch = {}, .lhs_contract = {0}, .rhs_contract = {1}},
                          {Shape::of({5, 3}), Shape::of({2, 5})}), "dot_general");
  auto branch = [](bool add) {
    auto b = std::make_shared<Graph>();
    Value v = b->input("v", Shape::of({3}));
    b->add_output(add ? b->exp(v) : b->mul(v, v));
    return b;
  };
  ops::If op;
  op.then_branch = branch(true);
  op.else_branch = branch(false);
  for (uint8_t c : {0, 1}) {
    testing::ParityOptions po;
    po.fixed_inputs = {{"in0", Tensor::boolean({}, std::vector<uint8_t>{c})}};
    Graph g = one_op(op, {Shape({}, DType::Bool), Shape::of({3})});
    EXPECT_EQ(count_op(legal(g), "where"), 1u);
    EXPECT_TRUE(same_numbers(g, legal, 1e-5, po));
  }
}

TEST(Legalize, NormsAndAxes) {
  expect_legalized(one_op(ops::GroupNorm{.groups = 2, .eps = 1e-5}, {Shape::of({2, 4, 3, 3}), Shape::of({4}), Shape::of({4})}), "group_norm");
  expect_legalized(one_op(ops::BatchNormInference{.eps = 1e-3},
                          {Shape::of({2, 3, 5}), Shape::of({3}), Shape::of({3}), Shape::of({3}), Shape::of({3})}), "batch_norm");
  expect_legalized(one_op(ops::LayerNorm2d{.eps = 1e-6}, {Shape::of({1, 3, 2, 2}), Shape::of({3}), Shape::of({3})}), "ln2d");
  expect_legalized(one_op(ops::LayerNorm{.axis = 1, .eps = 1e-5}, {Shape::of({2, 3, 4}), Shape::of({3, 4}), Shape::of({3, 4})}), "ln 2 axes");
  expect_legalized(one_op(ops::RmsNorm{.axis = -2, .eps = 1e-6}, {Shape::of({2, 3, 4}), Shape::of({3, 4})}), "rms 2 axes");
  for (bool keep : {false, true}) {
    expect_legalized(one_op(ops::Reduce{.kind = ReduceKind::Sum, .axes = {0, 2}, .keep_dims = keep}, {Shape::of({2, 3, 4})}), "reduce");
    expect_legalized(one_op(ops::Reduce{.kind = ReduceKind::Max, .axes = {}, .keep_dims = keep}, {Shape::of({2, 3})}), "reduce all");
    expect_legalized(one_op(ops::ArgMax{.axis = 1, .keep_dims = keep}, {Shape::of({2, 3, 4})}), "argmax");
    expect_legalized(one_op(ops::ArgMin{.axis = 0, .keep_dims = keep, .select_last = true}, {Shape::of({3, 2})}), "argmin");
  }
  expect_legalized(one_op(ops::Reduce{.kind = ReduceKind::Mean, .axes = {1}}, {Shape::of({2, 3, 4})}), "mean middle");
  expect_legalized(one_op(ops::Softmax{.axis = 0}, {Shape::of({3, 4, 2})}), "softmax axis 0");
  expect_legalized(one_op(ops::LogSoftmax{.axis = 1}, {Shape::of({3, 4, 2})}), "log_softmax axis 1");
  expect_legalized(one_op(ops::Cumsum{.axis = 0, .exclusive = true, .reverse = true}, {Shape::of({4, 3})}), "cumsum");
}

// Resize: one Gather per resized axis (nearest), two and a lerp (linear), every coordinate
// transform and rounding, up and down, several ranks and dtypes; same numbers as the CPU kernel.
TEST(Legalize, ResizeAsGathersAndLerps) {
  const ResizeCoord coords[] = {ResizeCoord::HalfPixel, ResizeCoord::Asymmetric, ResizeCoord::AlignCorners,
                                ResizeCoord::PytorchHalfPixel};
  const NearestRound rounds[] = {NearestRound::RoundPreferFloor, NearestRound::RoundPreferCeil, NearestRound::Floor,
                                 NearestRound::Ceil};
  struct Case {
    std::vector<int64_t> x;
    std::vector<double> scales;
    std::vector<int64_t> sizes;
  };
  const std::vector<Case> cases = {{{1, 2, 5, 7}, {1, 1, 2, 2}, {}},      {{1, 2, 6, 9}, {}, {1, 2, 4, 5}},
                                   {{2, 3, 4}, {1, 1.5, 0.75}, {}},      {{7}, {}, {13}},
                                   {{3, 5}, {}, {1, 1}},                 {{2, 4, 3}, {1, 2.5, 1}, {}}};
  for (const Case& c : cases)
    for (ResizeMode mode : {ResizeMode::Nearest, ResizeMode::Linear})
      for (ResizeCoord coord : coords)
        for (NearestRound round : rounds) {
          if (mode == ResizeMode::Linear && round != NearestRound::RoundPreferFloor) continue;
          ops::Resize op;
          op.mode = mode, op.coord = coord, op.nearest = round, op.scales = c.scales, op.sizes = c.sizes;
          const std::string what = std::string("resize ") + enum_name(mode) + " " + enum_name(coord) + " " +
                                   enum_name(round) + " " + dims_str(c.x);
          expect_legalized(one_op(op, {Shape(dims_of(c.x))}), what.c_str());
        }
  // Gathers only on the resized axes; linear in f32 for half types, rounded once.
  ops::Resize up;
  up.scales = {1, 1, 2, 2};
  Graph near = one_op(up, {Shape::of({1, 2, 5, 7})});
  EXPECT_EQ(count_op(legal(near), "gather"), 2u);
  up.mode = ResizeMode::Linear;
  for (DType t : {DType::F16, DType::BF16}) {
    Graph lin = one_op(up, {Shape::of({1, 2, 5, 7}, t)});
    const Graph l = legal(lin);
    EXPECT_EQ(count_op(l, "gather"), 4u);
    EXPECT_EQ(count_op(l, "cast"), 2u);
    EXPECT_TRUE(same_numbers(lin, legal)) << dtype_name(t);
  }
  ops::Resize nearest_any;
  nearest_any.sizes = {3, 8};
  for (DType t : {DType::I32, DType::I64, DType::Bool, DType::F16})
    expect_legalized(one_op(nearest_any, {Shape::of({5, 3}, t)}), dtype_name(t));
  // An output that takes one input alone is that input, not a 0-weighted sum: infinities stay.
  ops::Resize lin3;
  lin3.mode = ResizeMode::Linear, lin3.coord = ResizeCoord::AlignCorners, lin3.sizes = {5};
  testing::ParityOptions po;
  const float inf = std::numeric_limits<float>::infinity();
  po.fixed_inputs = {{"in0", Tensor::f32({3}, std::vector<float>{1.f, inf, -2.f})}};
  EXPECT_TRUE(same_numbers(one_op(lin3, {Shape::of({3})}), legal, 1e-5, po));
  // A symbolic dim at scale 1 is left alone; a symbolic dim that is resized has no decomposition.
  ops::Resize keep;
  keep.scales = {1, 2};
  Graph sym = one_op(keep, {Shape({Dim::symbol("n"), Dim(3)}, DType::F32)});
  EXPECT_EQ(count_op(legal(sym), "gather"), 1u);
  ops::Resize to_size;
  to_size.sizes = {4, 6};
  const std::string msg = testing::error_message([&] { legal(one_op(to_size, {Shape({Dim::symbol("n"), Dim(3)}, DType::F32)})); });
  EXPECT_NE(msg.find("(resize)"), std::string::npos) << msg;
}

// Im2Col: a zero Pad (when padded) and one Gather of every window position.
TEST(Legalize, Im2ColAsPadAndGather) {
  struct Case {
    std::vector<int64_t> x, kernel, stride, pads, dilation;
  };
  const std::vector<Case> cases = {{{1, 2, 5, 6}, {3, 3}, {}, {}, {}},
                                   {{2, 3, 7, 5}, {2, 3}, {2, 1}, {1, 0, 2, 1}, {}},
                                   {{1, 1, 9, 8}, {3, 2}, {1, 2}, {0, 1, 1, 0}, {2, 3}},
                                   {{2, 2, 4, 4}, {1, 1}, {3, 3}, {}, {}}};
  for (const Case& c : cases) {
    ops::Im2Col op;
    op.kernel = c.kernel, op.stride = c.stride, op.pads = c.pads, op.dilation = c.dilation;
    for (DType t : {DType::F32, DType::BF16}) {
      Graph g = one_op(op, {Shape(dims_of(c.x), t)});
      const Graph l = legal(g);
      EXPECT_EQ(count_op(l, "gather"), 1u);
      EXPECT_EQ(count_op(l, "pad"), c.pads.empty() ? 0u : 1u);
      EXPECT_TRUE(same_numbers(g, legal)) << dims_str(c.x) << " " << dtype_name(t);
    }
  }
}

// Conv and Pool beyond what a library runs: a backend that runs them only with pads alike at both
// ends of every axis (cuDNN) gets a Pad in front; one with no conv at all gets Im2Col + MatMul.
bool symmetric_window_ops(const Graph& g, const Node& n) {
  auto sym = [](const std::vector<int64_t>& p) {
    for (size_t i = 0; i < p.size() / 2; ++i)
      if (p[i] != p[p.size() / 2 + i]) return false;
    return true;
  };
  if (const auto* c = std::get_if<ops::Conv>(&n.op)) return sym(c->pads);
  if (const auto* p = std::get_if<ops::Pool>(&n.op)) return sym(p->pads);
  return primitives_only(g, n);
}
bool no_conv(const Graph& g, const Node& n) { return std::string(op_name(n.op)) != "conv" && primitives_only(g, n); }

TEST(Legalize, ConvAndPoolBeyondWhatALibraryRuns) {
  auto with = [](const passes::ClaimFn& claims) {
    return [claims](const Graph& g) { return legalize(g, claims, "test"); };
  };
  struct Case {
    std::vector<int64_t> x, w;
    std::vector<int64_t> stride, pads, dilation;
    int64_t groups;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 8}, {4, 3, 3, 3}, {}, {1, 0, 2, 1}, {}, 1, true},        // asymmetric (TF "SAME")
      {{1, 4, 10, 7}, {6, 2, 3, 2}, {2, 1}, {0, 1, 1, 1}, {1, 2}, 2, false},
      {{2, 6, 7, 7}, {6, 1, 3, 3}, {}, {1, 1, 1, 1}, {}, 6, true},        // depthwise, symmetric
      {{1, 3, 8, 9}, {2, 3, 3, 5}, {1, 2}, {1, 2, 1, 2}, {2, 1}, 1, true},
      {{2, 3, 11}, {5, 3, 4}, {2}, {2, 1}, {}, 1, true},                  // 1-d
      {{1, 2, 13}, {4, 1, 3}, {}, {}, {3}, 2, false}};
  for (const Case& c : cases) {
    Graph g;
    std::vector<Value> ins{g.input("x", Shape(dims_of(c.x))), g.input("w", Shape(dims_of(c.w)))};
    if (c.bias) ins.push_back(g.input("b", Shape::of({c.w[0]})));
    ops::Conv op;
    op.stride = c.stride, op.pads = c.pads, op.dilation = c.dilation, op.groups = c.groups;
    g.add_output(g.apply(op, ins));
    const std::string what = dims_str(c.x) + " pads " + dims_str(c.pads);
    const Graph lib = legalize(g, symmetric_window_ops, "test");
    EXPECT_EQ(count_op(lib, "conv"), 1u) << what;
    EXPECT_EQ(count_op(lib, "pad"), symmetric_window_ops(g, g.node(g.outputs()[0].node)) ? 0u : 1u) << what;
    EXPECT_TRUE(same_numbers(g, with(symmetric_window_ops), 1e-4)) << what;
    const Graph none = legalize(g, no_conv, "test");
    EXPECT_EQ(count_op(none, "conv"), 0u) << what;
    EXPECT_EQ(count_op(none, "matmul"), 1u) << what;
    EXPECT_TRUE(same_numbers(g, with(no_conv), 1e-4)) << what;
  }
  // 3-d: the pads move into a Pad, but there is no Im2Col for it.
  Graph g3;
  ops::Conv c3;
  c3.pads = {1, 0, 0, 0, 1, 1};
  g3.add_output(g3.apply(c3, {g3.input("x", Shape::of({1, 2, 4, 5, 5})), g3.input("w", Shape::of({3, 2, 2, 2, 2}))}));
  EXPECT_TRUE(same_numbers(g3, with(symmetric_window_ops), 1e-4));
  const std::string msg = testing::error_message([&] { legalize(g3, no_conv, "test"); });
  EXPECT_NE(msg.find("(conv)"), std::string::npos) << msg;
}

// ConvTranspose on a backend without it: a Conv of stride 1 over the input with zeros between its
// elements, padded (or cropped) by the kernel's reach, with the kernel flipped; the Conv then
// takes cuDNN's path (no pads) or, with no conv either, Im2Col + MatMul.
bool no_conv_transpose(const Graph& g, const Node& n) {
  return !std::holds_alternative<ops::ConvTranspose>(n.op) && symmetric_window_ops(g, n);
}

TEST(Legalize, ConvTransposeAsAConvOfStrideOne) {
  auto with = [](const passes::ClaimFn& claims) {
    return [claims](const Graph& g) { return legalize(g, claims, "test"); };
  };
  struct Case {
    std::vector<int64_t> x, w, stride, pads, dilation, output_padding;
    int64_t groups;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{1, 1, 3, 3}, {1, 2, 3, 3}, {}, {}, {}, {}, 1, false},                 // ONNX's basic case
      {{1, 1, 3, 3}, {1, 2, 3, 3}, {2, 2}, {0, 0, 1, 1}, {}, {}, 1, true},     // autopad SAME: asymmetric
      {{2, 4, 5, 4}, {4, 3, 3, 2}, {3, 2}, {1, 0, 2, 1}, {1, 2}, {1, 1}, 1, true},
      {{1, 4, 4, 5}, {4, 1, 3, 3}, {2, 1}, {1, 1, 1, 1}, {2, 1}, {1, 0}, 2, false},  // groups, dilation
      {{2, 6, 5, 5}, {6, 1, 2, 2}, {1, 1}, {2, 1, 1, 2}, {}, {}, 6, true},    // pads beyond the reach: a crop
      {{1, 2, 4, 3}, {2, 3, 1, 1}, {2, 3}, {}, {}, {1, 2}, 1, false}};        // 1x1 kernel, output padding
  for (const Case& c : cases) {
    Graph g;
    std::vector<Value> ins{g.input("x", Shape(dims_of(c.x))), g.input("w", Shape(dims_of(c.w)))};
    if (c.bias) ins.push_back(g.input("b", Shape::of({c.w[1] * c.groups})));
    ops::ConvTranspose op;
    op.stride = c.stride, op.pads = c.pads, op.dilation = c.dilation, op.output_padding = c.output_padding;
    op.groups = c.groups;
    g.add_output(g.apply(op, ins));
    const std::string what = dims_str(c.x) + " stride " + dims_str(c.stride) + " pads " + dims_str(c.pads);
    const Graph lib = legalize(g, no_conv_transpose, "test");
    EXPECT_EQ(count_op(lib, "conv_transpose"), 0u) << what;
    EXPECT_EQ(count_op(lib, "conv"), 1u) << what;
    EXPECT_TRUE(same_numbers(g, with(no_conv_transpose), 1e-4)) << what;
    EXPECT_TRUE(same_numbers(g, with(no_conv), 1e-4)) << what;  // and on through Im2Col + MatMul
  }
  // A backend that runs ConvTranspose keeps it (the near miss of the decomposition).
  Graph g = one_op(ops::ConvTranspose{}, {Shape::of({1, 2, 3, 3}), Shape::of({2, 2, 3, 3})});
  EXPECT_EQ(count_op(legalize(g, primitives_only, "test"), "conv_transpose"), 1u);
}

// Integer and bool Max / Min on a backend whose reductions take floats only: moved to the last
// axis first, then through an exact float type and back.
bool float_reduces(const Graph& g, const Node& n) {
  if (std::holds_alternative<ops::Reduce>(n.op) && !is_float(g.shape(n.inputs[0]).dtype)) return false;
  return primitives_only(g, n);
}

TEST(Legalize, IntegerMaxMinThroughAnExactFloat) {
  auto with = [](const Graph& g) { return legalize(g, float_reduces, "test"); };
  for (DType t : {DType::Bool, DType::U8, DType::I16, DType::I32, DType::U32}) {
    for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min}) {
      Graph g;
      const Value x = g.input("x", Shape::of({3, 4, 5}, t));
      g.add_output(g.reduce(k, x, {-1}));
      g.add_output(g.reduce(k, x, {0, 2}, true));  // other axes: to the last axis first
      const Graph l = with(g);
      EXPECT_EQ(count_op(l, "reduce"), 2u) << dtype_name(t);
      const DType exact = t == DType::I32 || t == DType::U32 ? DType::F64 : DType::F32;
      for (const Node& n : l.nodes()) {
        if (std::holds_alternative<ops::Reduce>(n.op)) {
          EXPECT_EQ(l.shape(n.inputs[0]).dtype, exact) << dtype_name(t);
        }
      }
      testing::ParityOptions o;
      o.int_hi = t == DType::Bool ? 2 : 2000000000;  // 32-bit values an f32 would round
      EXPECT_TRUE(same_numbers(g, with, 1e-5, o)) << dtype_name(t) << " " << enum_name(k);
    }
  }
  // Near misses: a sum (no exact float for a wrapping i32 sum) and i64 (beyond f64's 53 bits)
  // stay unsupported, and the report names them.
  for (auto [t, k] : {std::pair{DType::I32, ReduceKind::Sum}, std::pair{DType::I64, ReduceKind::Max}}) {
    Graph g;
    g.add_output(g.reduce(k, g.input("x", Shape::of({3, 4}, t)), {-1}));
    const std::string msg = testing::error_message([&] { with(g); });
    EXPECT_NE(msg.find("(reduce)"), std::string::npos) << msg;
  }
}

// Pools with pads or ceil_mode on a backend that runs only plain float pools: a Pad that holds
// every window and the plain pool, averages rescaled by the taps the op counts; small-integer max
// pools through f32.
bool plain_pools(const Graph& g, const Node& n) {
  if (const auto* p = std::get_if<ops::Pool>(&n.op))
    return is_float(g.shape(n.inputs[0]).dtype) && !p->ceil_mode &&
           std::all_of(p->pads.begin(), p->pads.end(), [](int64_t v) { return v == 0; });
  return primitives_only(g, n);
}

bool no_pools(const Graph& g, const Node& n) { return !std::holds_alternative<ops::Pool>(n.op) && primitives_only(g, n); }

TEST(Legalize, PoolsWithPadsOrCeilModeAsPadAndPlainPool) {
  struct Case {
    PoolKind kind;
    std::vector<int64_t> x, kernel, stride, pads, dilation;
    bool include, ceil;
    DType t = DType::F32;
  };
  const std::vector<Case> cases = {
      {PoolKind::Max, {2, 3, 8, 7}, {3, 2}, {2, 1}, {1, 0, 2, 1}, {}, false, false},
      {PoolKind::Max, {1, 2, 8, 7}, {3, 2}, {2, 2}, {1, 0, 1, 1}, {}, false, true},   // ceil overhang
      {PoolKind::Avg, {1, 2, 6, 6}, {3, 3}, {}, {1, 1, 2, 0}, {}, false, false},      // pads not counted
      {PoolKind::Avg, {2, 2, 7, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, false, true},   // ceil, not counted
      {PoolKind::Avg, {1, 3, 7, 8}, {3, 2}, {2, 3}, {1, 0, 0, 1}, {}, true, true},    // ceil, counted
      {PoolKind::Avg, {2, 3, 8, 7}, {3, 2}, {2, 1}, {1, 0, 2, 1}, {}, true, false},
      {PoolKind::Avg, {1, 2, 11, 10}, {3, 2}, {1, 2}, {2, 1, 1, 1}, {2, 3}, false, false},  // dilated
      {PoolKind::Avg, {2, 3, 13}, {4}, {3}, {2, 1}, {}, false, true},                 // 1-d
      {PoolKind::Max, {1, 2, 6, 7}, {2, 2}, {2, 2}, {1, 1, 0, 1}, {}, false, false, DType::U8},
      {PoolKind::Avg, {1, 2, 6, 6}, {3, 3}, {}, {1, 1, 2, 0}, {}, false, false, DType::BF16}};
  for (const Case& c : cases) {
    Graph g;
    ops::Pool p;
    p.kind = c.kind, p.kernel = c.kernel, p.stride = c.stride, p.pads = c.pads, p.dilation = c.dilation;
    p.count_include_pad = c.include, p.ceil_mode = c.ceil;
    g.add_output(g.apply(p, {g.input("x", Shape(dims_of(c.x), c.t))}));
    const std::string what = std::string(enum_name(c.kind)) + " " + dims_str(c.x) + " pads " + dims_str(c.pads) +
                             (c.ceil ? " ceil" : "") + (c.include ? " include" : "") + " " + dtype_name(c.t);
    const Graph l = legalize(g, plain_pools, "test");
    EXPECT_EQ(count_op(l, "pool"), 1u) << what;
    EXPECT_EQ(count_op(l, "pad"), 1u) << what;
    EXPECT_TRUE(same_numbers(g, [](const Graph& gg) { return legalize(gg, plain_pools, "test"); }, 1e-5)) << what;
    // With no pool at all: each window's taps gathered and reduced.
    const Graph none = legalize(g, no_pools, "test");
    EXPECT_EQ(count_op(none, "pool"), 0u) << what;
    EXPECT_EQ(count_op(none, "gather"), 1u) << what;
    EXPECT_TRUE(same_numbers(g, [](const Graph& gg) { return legalize(gg, no_pools, "test"); }, 1e-5)) << what;
  }
  {  // 3-d, dilated, no pads
    Graph g;
    ops::Pool p;
    p.kind = PoolKind::Avg, p.kernel = {2, 3, 2}, p.stride = {1, 2, 1}, p.dilation = {2, 1, 2};
    g.add_output(g.apply(p, {g.input("x", Shape::of({1, 2, 6, 7, 5}))}));
    EXPECT_TRUE(same_numbers(g, [](const Graph& gg) { return legalize(gg, no_pools, "test"); }, 1e-5));
  }
  // Other integer pools have no decomposition.
  Graph gi;
  ops::Pool mi;
  mi.kernel = {2, 2}, mi.pads = {1, 1, 1, 1};
  gi.add_output(gi.apply(mi, {gi.input("x", Shape::of({1, 1, 4, 4}, DType::I32))}));
  const std::string msg = testing::error_message([&] { legalize(gi, plain_pools, "test"); });
  EXPECT_NE(msg.find("(pool)"), std::string::npos) << msg;
}

TEST(Legalize, ReportsEveryNodeItCannotRun) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3}));
  auto body = std::make_shared<Graph>();
  Value b = body->input("v", Shape::of({2, 3}));
  body->add_output(body->add(b, b));
  auto cond = std::make_shared<Graph>();
  Value c = cond->input("v", Shape::of({2, 3}));
  cond->add_output(cond->compare(CompareKind::Lt, cond->sum(c, {}), cond->scalar(100)));
  ops::While w;
  w.max_iterations = 4;
  w.body = body;
  w.cond = cond;
  Value y = g.apply(w, {x});
  Value z = g.apply(w, {g.relu(y)});
  g.add_output(z);
  const std::string msg = testing::error_message([&] { legal(g); });
  EXPECT_NE(msg.find("cannot run 2 node(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(while)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[2,3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Device::Cpu"), std::string::npos) << msg;
  // The backend's reason for each node is appended when it gives one.
  const passes::ReasonFn why = [](const Graph&, const Node& n) {
    return std::string("no kernel for ") + op_name(n.op) + " here";
  };
  const std::string with_reason = testing::error_message([&] { legalize(g, primitives_only, "test", why); });
  EXPECT_NE(with_reason.find("body=<graph 2 nodes>]: no kernel for while here"), std::string::npos)
      << with_reason;
}

TEST(Legalize, DispatchReport) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 8}));
  Value y = g.apply(ops::FusedSwiGLU{}, {x});
  g.add_output(g.softmax(y, -1));
  auto rows = dispatch_report(g, primitives_only);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].op, "fused_swiglu");
  EXPECT_EQ(rows[0].decomposed, 1u);
  EXPECT_EQ(rows[1].op, "softmax");
  EXPECT_EQ(rows[1].native, 1u);
}

}  // namespace
}  // namespace rlx
