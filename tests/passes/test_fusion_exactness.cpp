// The optimized graph computes exactly what the unoptimized graph computes (issue 26, item 17):
// integer wrapping before an activation, f16/bf16 rounding of every intermediate, NaN and -0.0
// through fused activations, zero-size axes at compile time. Every graph here is run three
// ways on the CPU with the same inputs: unoptimized (the reference), through the one pass
// (unoptimized otherwise, so the fused kernel runs) and through the whole pipeline; the results
// must match bit for bit (NaN matches any NaN; -0.0 does not match +0.0).
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "models/transformer.h"
#include "passes/canonical.h"
#include "passes/fusion.h"
#include "passes/pass_test_util.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using namespace passes;
using testing::count_op;
using testing::pass_fn;

std::vector<Tensor> run_graph(const Graph& g, bool optimize, const NamedTensors& ins, const NamedTensors& params) {
  CompileOptions o;
  o.optimize = optimize;
  CompiledGraph c = Session(Device::Cpu).compile(g, o);
  for (const auto& [name, t] : params) c.set_param(name, t);
  return c.run(ins);
}

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

// Bit-for-bit equality; float NaNs match whatever their payload.
::testing::AssertionResult bit_same(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure() << "dtype/shape differ: " << dtype_name(a.dtype()) << " vs "
                                         << dtype_name(b.dtype());
  const size_t es = dtype_size(a.dtype());
  const auto* pa = static_cast<const uint8_t*>(a.raw());
  const auto* pb = static_cast<const uint8_t*>(b.raw());
  const std::vector<double> da = testing::to_doubles(a), db = testing::to_doubles(b);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const size_t k = static_cast<size_t>(i);
    if (is_float_type(a.dtype()) && std::isnan(da[k]) && std::isnan(db[k])) continue;
    if (std::memcmp(pa + k * es, pb + k * es, es) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.numel() << " elements differ; first at " << first
                                       << ": " << da[static_cast<size_t>(first)] << " vs "
                                       << db[static_cast<size_t>(first)];
}

// Reference (unoptimized), `pass` applied (then unoptimized) and the full pipeline: all equal.
// Returns the reference outputs.
std::vector<Tensor> expect_exact(const Graph& g, const std::function<Graph(const Graph&)>& pass,
                                 const NamedTensors& ins, const NamedTensors& params = {}) {
  const std::vector<Tensor> ref = run_graph(g, false, ins, params);
  const std::vector<Tensor> fused = run_graph(pass(g), false, ins, params);
  const std::vector<Tensor> opt = run_graph(g, true, ins, params);
  EXPECT_EQ(ref.size(), fused.size());
  EXPECT_EQ(ref.size(), opt.size());
  for (size_t i = 0; i < ref.size() && i < fused.size() && i < opt.size(); ++i) {
    EXPECT_TRUE(bit_same(fused[i], ref[i])) << "output " << i << ": the pass alone";
    EXPECT_TRUE(bit_same(opt[i], ref[i])) << "output " << i << ": the optimized pipeline";
  }
  return ref;
}

template <class T>
Tensor of(DType dt, std::vector<int64_t> shape, std::vector<T> v) {
  return Tensor::from_bytes(dt, std::move(shape), v.data(), v.size() * sizeof(T));
}

Graph mm_bias_act(DType dt, int64_t m, int64_t k, int64_t n, std::optional<ActKind> act, bool residual = false) {
  Graph g;
  Value x = g.input("x", Shape::of({m, k}, dt));
  Value w = g.input("w", Shape::of({k, n}, dt));
  Value b = g.input("b", Shape::of({n}, dt));
  Value y = g.add(g.matmul(x, w), b);
  if (act) y = g.act(*act, y);
  if (residual) y = g.add(y, g.input("r", Shape::of({m, n}, dt)));
  g.add_output(y);
  return g;
}

Graph both_matmul_passes(const Graph& g) { return fuse_matmul_residual(fuse_matmul_bias_act(g)); }

PassContext small_threshold() {
  PassContext c;
  c.attention_threshold = 64;
  return c;
}

// ---- integers: every step wraps to the output type ------------------------------------------

TEST(FusionExactness, Int8MatMulBiasReluWrapsBeforeTheRelu) {
  Graph g = mm_bias_act(DType::I8, 3, 2, 2, ActKind::Relu);
  const Graph f = fuse_matmul_bias_act(g);
  ASSERT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);  // still fires on integers: the kernel is exact
  ASSERT_EQ(count_op(f, "activation"), 0u);
  const NamedTensors ins{{"x", of<int8_t>(DType::I8, {3, 2}, {100, 100, 100, 0, -100, -100})},
                         {"w", of<int8_t>(DType::I8, {2, 2}, {1, 1, 1, -1})},
                         {"b", of<int8_t>(DType::I8, {2}, {0, 100})}};
  const auto ref = expect_exact(g, both_matmul_passes, ins);
  // row 0: [200 -> -56, 0] + [0, 100] = [-56, 100] -> Relu [0, 100] (a wide Relu gave 200 -> -56)
  // row 1: [100, 100] + b = [100, 200 -> -56] -> [100, 0]
  // row 2: [-200 -> 56, 0] + b = [56, 100]
  EXPECT_EQ(testing::to_doubles(ref[0]), (std::vector<double>{0, 100, 100, 0, 56, 100}));
}

TEST(FusionExactness, Int32MatMulBiasReluWrapsBeforeTheRelu) {
  Graph g = mm_bias_act(DType::I32, 1, 2, 1, ActKind::Relu);
  ASSERT_EQ(count_op(fuse_matmul_bias_act(g), "fused_matmul_bias_act"), 1u);
  const int32_t big = int32_t{1} << 30;
  const NamedTensors ins{{"x", of<int32_t>(DType::I32, {1, 2}, {big, big})},
                         {"w", of<int32_t>(DType::I32, {2, 1}, {1, 1})},
                         {"b", of<int32_t>(DType::I32, {1}, {0})}};
  const auto ref = expect_exact(g, both_matmul_passes, ins);
  EXPECT_EQ(testing::to_doubles(ref[0]), std::vector<double>{0});  // 2^31 wraps to INT_MIN, Relu -> 0
}

TEST(FusionExactness, Int8ResidualAfterReluWraps) {
  // relu(x@w + b) + r: the Relu sees the wrapped sum, the residual add wraps again.
  Graph g = mm_bias_act(DType::I8, 2, 2, 1, ActKind::Relu, /*residual=*/true);
  const Graph f = both_matmul_passes(g);
  ASSERT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);
  ASSERT_EQ(count_op(f, "binary"), 0u);
  const Node& n = f.node(f.outputs()[0].node);
  ASSERT_TRUE(std::get<ops::FusedMatMulBiasAct>(n.op).residual);
  const NamedTensors ins{{"x", of<int8_t>(DType::I8, {2, 2}, {100, 100, 50, 50})},
                         {"w", of<int8_t>(DType::I8, {2, 1}, {1, 1})},
                         {"b", of<int8_t>(DType::I8, {1}, {0})},
                         {"r", of<int8_t>(DType::I8, {2, 1}, {10, 100})}};
  const auto ref = expect_exact(g, both_matmul_passes, ins);
  // row 0: 200 -> -56 -> Relu 0 -> + 10 = 10; row 1: 100 -> 100 + 100 = 200 -> -56
  EXPECT_EQ(testing::to_doubles(ref[0]), (std::vector<double>{10, -56}));
}

TEST(FusionExactness, Int8MatMulPlusResidualWithoutBias) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 2}, DType::I8));
  Value w = g.input("w", Shape::of({2, 2}, DType::I8));
  Value r = g.input("r", Shape::of({2, 2}, DType::I8));
  Value mm = g.matmul(x, w);
  g.add_output(g.add(r, mm));  // the residual on the left
  g.add_output(g.relu(r));     // r has a second consumer: it is an operand, not absorbed
  const Graph f = fuse_matmul_residual(g);
  ASSERT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);
  const NamedTensors ins{{"x", of<int8_t>(DType::I8, {2, 2}, {127, 127, -128, 1})},
                         {"w", of<int8_t>(DType::I8, {2, 2}, {1, 2, 3, -4})},
                         {"r", of<int8_t>(DType::I8, {2, 2}, {100, -100, 127, -128})}};
  expect_exact(g, pass_fn(fuse_matmul_residual), ins);
}

// ---- f16 / bf16: the documented policy (docs/passes.md) --------------------------------------
// FusedMatMulBiasAct on f16/bf16 runs bias, activation and residual on the f32 accumulator and
// rounds once, on the CPU as on CUDA (whose cuBLASLt / GEMV epilogues work that way). The
// unfused graph rounds after every node, so the two can differ by a rounding, and where an
// intermediate overflows the storage type the fused result can be finite. These tests pin the
// policy: the fused value is the single-rounded one.

// Fused (the pass alone, and the pipeline) vs unfused; returns {unfused, fused}.
std::pair<double, double> half_case(const Graph& g, const NamedTensors& ins) {
  const double ref = testing::to_doubles(run_graph(g, false, ins, {})[0])[0];
  const double fused = testing::to_doubles(run_graph(both_matmul_passes(g), false, ins, {})[0])[0];
  const double opt = testing::to_doubles(run_graph(g, true, ins, {})[0])[0];
  EXPECT_EQ(std::bit_cast<uint64_t>(fused), std::bit_cast<uint64_t>(opt)) << "the pipeline fuses like the pass";
  return {ref, fused};
}

TEST(FusionExactness, F16EpilogueRoundsOnce) {
  // 2048 + 1 = 2049 is not an f16 value: the unfused MatMul stores 2048 and 2048 - 2048 = 0;
  // the fused epilogue adds the bias to the f32 accumulator: 2049 - 2048 = 1.
  Graph g = mm_bias_act(DType::F16, 1, 2, 1, std::nullopt);
  ASSERT_EQ(count_op(fuse_matmul_bias_act(g), "fused_matmul_bias_act"), 1u);
  const NamedTensors ins{{"x", Tensor::f16({1, 2}, std::vector<float>{2048, 1})},
                         {"w", Tensor::f16({2, 1}, std::vector<float>{1, 1})},
                         {"b", Tensor::f16({1}, std::vector<float>{-2048})}};
  EXPECT_EQ(half_case(g, ins), (std::pair<double, double>{0.0, 1.0}));
  Graph ge = mm_bias_act(DType::F16, 1, 2, 1, ActKind::Gelu);
  const auto [ref, fused] = half_case(ge, ins);
  EXPECT_EQ(ref, 0.0);
  const float gelu1 = static_cast<float>(0.5 * (1 + std::erf(1 / std::sqrt(2.0))));
  EXPECT_EQ(fused, testing::to_doubles(Tensor::f16({1}, std::vector<float>{gelu1}))[0]);
}

TEST(FusionExactness, F16ProductOverflowIsFiniteWhenFused) {
  // 60000 + 60000 overflows f16 (max 65504): the unfused graph is inf; the fused epilogue adds
  // -60000 in f32 first and stores 60000.
  Graph g = mm_bias_act(DType::F16, 1, 2, 1, ActKind::Relu);
  const NamedTensors ins{{"x", Tensor::f16({1, 2}, std::vector<float>{60000, 60000})},
                         {"w", Tensor::f16({2, 1}, std::vector<float>{1, 1})},
                         {"b", Tensor::f16({1}, std::vector<float>{-60000})}};
  EXPECT_EQ(half_case(g, ins), (std::pair<double, double>{std::numeric_limits<double>::infinity(), 60000.0}));
}

TEST(FusionExactness, Bf16EpilogueRoundsOnce) {
  Graph g = mm_bias_act(DType::BF16, 1, 2, 1, ActKind::Silu, /*residual=*/true);
  const NamedTensors ins{{"x", Tensor::bf16({1, 2}, std::vector<float>{256, 1})},
                         {"w", Tensor::bf16({2, 1}, std::vector<float>{1, 1})},
                         {"b", Tensor::bf16({1}, std::vector<float>{-256})},
                         {"r", Tensor::bf16({1, 1}, std::vector<float>{0.5f})}};
  // unfused: 257 -> 256, silu(0) + 0.5 = 0.5; fused: silu(1) + 0.5 = 1.2311 -> bf16 1.234375
  EXPECT_EQ(half_case(g, ins), (std::pair<double, double>{0.5, 1.234375}));
}

TEST(FusionExactness, MatMulEpiloguesOnRandomValues) {
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    for (ActKind act : {ActKind::Gelu, ActKind::GeluApprox, ActKind::Silu, ActKind::Relu}) {
      Graph g = mm_bias_act(dt, 7, 33, 9, act, /*residual=*/true);
      const NamedTensors ins{{"x", testing::random_tensor(dt, {7, 33}, 1, -2, 2)},
                             {"w", testing::random_tensor(dt, {33, 9}, 2, -2, 2)},
                             {"b", testing::random_tensor(dt, {9}, 3, -20, 20)},
                             {"r", testing::random_tensor(dt, {7, 9}, 4, -20, 20)}};
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + enum_name(act));
      if (dt == DType::F32 || dt == DType::F64) {
        expect_exact(g, both_matmul_passes, ins);  // same steps, same dtype: bit for bit
      } else {
        // One rounding instead of three: within a few storage ulps of the unfused graph.
        const Tensor ref = run_graph(g, false, ins, {})[0];
        const Tensor fused = run_graph(both_matmul_passes(g), false, ins, {})[0];
        const testing::Tolerance tol = dt == DType::F16 ? testing::Tolerance{2e-3, 0.125} : testing::Tolerance{2e-2, 1.0};
        EXPECT_TRUE(testing::all_close(fused, {7, 9}, testing::to_doubles(ref), tol));
        EXPECT_TRUE(bit_same(run_graph(g, true, ins, {})[0], fused));
      }
    }
  }
}

// ---- NaN, inf through fused activations -------------------------------------------------------

TEST(FusionExactness, NanAndInfThroughFusedRelu) {
  Graph g = mm_bias_act(DType::F32, 4, 2, 1, ActKind::Relu);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const NamedTensors ins{{"x", Tensor::f32({4, 2}, std::vector<float>{nan, 1, -inf, 1, inf, 1, -3, 1})},
                         {"w", Tensor::f32({2, 1}, std::vector<float>{1, 1})},
                         {"b", Tensor::f32({1}, std::vector<float>{0})}};
  const auto ref = expect_exact(g, both_matmul_passes, ins);
  const auto v = testing::to_doubles(ref[0]);
  EXPECT_TRUE(std::isnan(v[0]));  // Relu keeps NaN
  EXPECT_EQ(v[1], 0.0);
  EXPECT_EQ(v[2], std::numeric_limits<double>::infinity());
  EXPECT_EQ(v[3], 0.0);
}

Graph bert_layer(DType dt, ActKind act) {
  Graph g;
  Value h = g.input("hidden", Shape::of({1, 6, 16}, dt));
  Value m = g.input("mask", Shape::of({1, 6}, dt));
  models::BertLayerConfig c;
  c.hidden = 16;
  c.num_heads = 2;
  c.ffn = 32;
  c.activation = act;
  g.add_output(models::build_bert_layer(g, h, m, c, "l0"), "out");
  return g;
}

Graph layer_passes(const Graph& g) {
  return fuse_transformer_layer(fuse_attention_block(fuse_residual_ln(fuse_matmul_bias_act(g)), small_threshold()),
                                small_threshold());
}

NamedTensors bert_params(const Graph& g, DType dt) {
  NamedTensors ps;
  uint64_t seed = 10;
  for (const NodeId id : g.param_nodes()) {
    const Node& n = g.node(id);
    ps.emplace_back(std::get<ops::Param>(n.op).name, testing::random_tensor(dt, n.outputs[0].concrete(), seed++, -0.5, 0.5));
  }
  return ps;
}

NamedTensors bert_inputs(DType dt) {
  return {{"hidden", testing::random_tensor(dt, {1, 6, 16}, 7, -2, 2)},
          {"mask", testing::from_doubles(dt, {1, 6}, {1, 1, 1, 1, 0, 1})}};
}

TEST(FusionExactness, TransformerLayerReluKeepsNan) {
  // A NaN in the fc1 bias: the standalone Relu keeps it, so the fc2 product and the second
  // LayerNorm are NaN; a Relu that maps NaN to 0 gives finite numbers.
  Graph g = bert_layer(DType::F32, ActKind::Relu);
  ASSERT_EQ(count_op(layer_passes(g), "fused_transformer_layer"), 1u);
  NamedTensors ps = bert_params(g, DType::F32);
  for (auto& [name, t] : ps)
    if (name == "l0.ffn.fc1.bias") t.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  const auto ref = expect_exact(g, layer_passes, bert_inputs(DType::F32), ps);
  for (double v : testing::to_doubles(ref[0])) EXPECT_TRUE(std::isnan(v));
}

TEST(FusionExactness, TransformerLayerMatchesTheUnfusedLayer) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (ActKind act : {ActKind::Gelu, ActKind::Relu}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + enum_name(act));
      Graph g = bert_layer(dt, act);
      ASSERT_EQ(count_op(layer_passes(g), "fused_transformer_layer"), 1u);
      // Same BLAS calls on the same rounded operands, the attention core and the norm
      // arithmetic of the standalone kernels: bit for bit, f16/bf16 included.
      expect_exact(g, layer_passes, bert_inputs(dt), bert_params(g, dt));
    }
  }
}

// A post-norm BERT layer written out by hand, so the near misses can change one detail.
struct HandLayer {
  double eps1 = 1e-5, eps2 = 1e-5;
  bool h1_is_output = false;
};
Graph hand_layer(const HandLayer& c) {
  const int64_t b = 1, s = 6, e = 16, heads = 2, d = 8, f = 32;
  Graph g;
  Value h = g.input("hidden", Shape::of({b, s, e}));
  Value m = g.input("mask", Shape::of({b, s}));
  auto linear = [&](Value x, const std::string& name, int64_t in, int64_t out) {
    return g.add(g.matmul(x, g.param(name + ".w", Shape::of({in, out}))), g.param(name + ".b", Shape::of({out})));
  };
  Value qkv = linear(h, "qkv", e, 3 * e);
  auto head = [&](int64_t i) { return g.reshape(g.narrow(qkv, 2, i * e, e), {b, s, heads, d}); };
  ops::Attention at{.num_heads = heads, .num_kv_heads = heads, .head_dim = d, .mask_kind = MaskKind::Custom};
  Value a = linear(g.reshape(g.attention(head(0), head(1), head(2), m, at), {b, s, e}), "out", e, e);
  Value h1 = g.layer_norm(g.add(h, a), g.param("ln1.g", Shape::of({e})), g.param("ln1.b", Shape::of({e})), c.eps1);
  Value ff = linear(g.gelu(linear(h1, "fc1", e, f)), "fc2", f, e);
  g.add_output(g.layer_norm(g.add(h1, ff), g.param("ln2.g", Shape::of({e})), g.param("ln2.b", Shape::of({e})), c.eps2),
               "out");
  if (c.h1_is_output) g.add_output(h1, "h1");
  return g;
}

TEST(FusionExactness, TransformerLayerNearMisses) {
  const NamedTensors ins = bert_inputs(DType::F32);
  {
    const Graph g = hand_layer({});
    ASSERT_EQ(count_op(layer_passes(g), "fused_transformer_layer"), 1u);  // the valid pattern fires
    expect_exact(g, layer_passes, ins, bert_params(g, DType::F32));
  }
  {  // the two LayerNorms disagree on eps: one fused op cannot carry both
    const Graph g = hand_layer({.eps1 = 1e-5, .eps2 = 1e-3});
    EXPECT_EQ(count_op(layer_passes(g), "fused_transformer_layer"), 0u);
    expect_exact(g, layer_passes, ins, bert_params(g, DType::F32));
  }
  {  // the first LayerNorm's output is also a graph output: it must not be absorbed
    const Graph g = hand_layer({.h1_is_output = true});
    EXPECT_EQ(count_op(layer_passes(g), "fused_transformer_layer"), 0u);
    expect_exact(g, layer_passes, ins, bert_params(g, DType::F32));
  }
}

// ---- the other fused kernels in f16 / bf16 ----------------------------------------------------

TEST(FusionExactness, SwigluRoundsTheSiluLikeTheUnfusedGraph) {
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    for (bool gate_first : {false, true}) {
      Graph g;
      Value c = g.input("c", Shape::of({8, 64}, dt));
      Value a = g.narrow(c, 1, 0, 32), b = g.narrow(c, 1, 32, 32);
      g.add_output(gate_first ? g.mul(g.silu(a), b) : g.mul(a, g.silu(b)));
      ASSERT_EQ(count_op(fuse_swiglu(g), "fused_swiglu"), 1u);
      SCOPED_TRACE(std::string(dtype_name(dt)) + (gate_first ? " gate first" : " up first"));
      expect_exact(g, pass_fn(fuse_swiglu), {{"c", testing::random_tensor(dt, {8, 64}, 5, -6, 6)}});
    }
  }
}

TEST(FusionExactness, DualMatMulSwigluHalf) {
  // x @ concat(Wup, Wgate) then FusedSwiGLU: each product element is the same dot product,
  // rounded to the storage type, then silu rounded, then the product rounded.
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    Graph g;
    Value x = g.input("x", Shape::of({5, 16}, dt));
    Value up = g.matmul(x, g.input("wu", Shape::of({16, 8}, dt)));
    Value gate = g.matmul(x, g.input("wg", Shape::of({16, 8}, dt)));
    g.add_output(g.mul(up, g.silu(gate)));
    ASSERT_EQ(count_op(fuse_swiglu_dual_matmul(g), "fused_swiglu"), 1u);
    SCOPED_TRACE(dtype_name(dt));
    expect_exact(g, pass_fn(fuse_swiglu_dual_matmul),
                 {{"x", testing::random_tensor(dt, {5, 16}, 1, -2, 2)},
                  {"wu", testing::random_tensor(dt, {16, 8}, 2, -2, 2)},
                  {"wg", testing::random_tensor(dt, {16, 8}, 3, -2, 2)}});
  }
}

TEST(FusionExactness, ResidualNormsHalf) {
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    for (bool rms : {false, true}) {
      Graph g;
      Value x = g.input("x", Shape::of({4, 24}, dt));
      Value r = g.input("r", Shape::of({4, 24}, dt));
      Value gamma = g.input("g", Shape::of({24}, dt));
      Value s = g.add(x, r);
      g.add_output(rms ? g.rms_norm(s, gamma, std::nullopt, 1e-3) : g.layer_norm(s, gamma, std::nullopt, 1e-3));
      const auto pass = rms ? pass_fn(fuse_residual_rms_norm) : pass_fn(fuse_residual_ln);
      ASSERT_EQ(count_op(pass(g), rms ? "fused_residual_rms_norm" : "fused_residual_ln"), 1u);
      SCOPED_TRACE(std::string(dtype_name(dt)) + (rms ? " rms" : " ln"));
      expect_exact(g, pass,
                   {{"x", testing::random_tensor(dt, {4, 24}, 1, -300, 300)},
                    {"r", testing::random_tensor(dt, {4, 24}, 2, -300, 300)},
                    {"g", testing::random_tensor(dt, {24}, 3, -2, 2)}});
    }
  }
}

// ---- regrouping products and elementwise regions --------------------------------------------

TEST(FusionExactness, SharedInputMatMulsFireAndStayExact) {
  for (DType dt : {DType::I8, DType::I32, DType::F16, DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g;
    Value x = g.input("x", Shape::of({3, 8}, dt));
    g.add_output(g.relu(g.matmul(x, g.param("wa", Shape::of({8, 4}, dt)))));
    g.add_output(g.matmul(x, g.param("wb", Shape::of({8, 6}, dt))));
    // near miss: a computed weight (not a param/constant) stays a separate product
    g.add_output(g.matmul(x, g.transpose(g.param("wc", Shape::of({5, 8}, dt)), {1, 0})));
    const Graph f = fuse_shared_input_matmul(g);
    EXPECT_EQ(count_op(f, "concat"), 1u);
    EXPECT_EQ(count_op(f, "narrow"), 2u);
    EXPECT_EQ(count_op(f, "matmul"), 2u);
    const double hi = is_float_type(dt) ? 2.0 : 100.0;
    expect_exact(g, pass_fn(fuse_shared_input_matmul), {{"x", testing::random_tensor(dt, {3, 8}, 1, -hi, hi)}},
                 {{"wa", testing::random_tensor(dt, {8, 4}, 2, -hi, hi)},
                  {"wb", testing::random_tensor(dt, {8, 6}, 3, -hi, hi)},
                  {"wc", testing::random_tensor(dt, {5, 8}, 4, -hi, hi)}});
  }
}

TEST(FusionExactness, ElementwiseRegionsInHalfAndIntegers) {
  for (DType dt : {DType::F16, DType::BF16, DType::I8}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g;
    Value x = g.input("x", Shape::of({4, 16}, dt));
    Value b = g.input("b", Shape::of({16}, dt));
    Value y = g.relu(g.sub(g.mul(g.add(x, b), x), b));
    if (dt != DType::I8) y = g.act(ActKind::Tanh, g.cast(g.cast(y, DType::F32), dt));
    g.add_output(y);
    EXPECT_EQ(count_op(mark_elementwise_regions(g), "elementwise_region"), 1u);
    const double hi = dt == DType::I8 ? 100.0 : 300.0;
    expect_exact(g, pass_fn(mark_elementwise_regions),
                 {{"x", testing::random_tensor(dt, {4, 16}, 1, -hi, hi)}, {"b", testing::random_tensor(dt, {16}, 2, -hi, hi)}});
  }
}

// ---- remove_trivial_ops: only true identities, -0.0 included ---------------------------------

TEST(FusionExactness, AddingPositiveZeroIsNotRemovedForFloats) {
  // -0.0 + +0.0 = +0.0, so x + 0 is not the identity on floats; x + (-0.0) and x - (+0.0) are.
  Graph g;
  Value x = g.input("x", Shape::of({4}));
  g.add_output(g.add(x, g.constant(Tensor::scalar_f32(0))), "plus_zero");
  g.add_output(g.add(g.constant(Tensor::scalar_f32(0)), x), "zero_plus");
  g.add_output(g.sub(x, g.constant(Tensor::scalar_f32(-0.0f))), "minus_neg_zero");
  g.add_output(g.add(x, g.constant(Tensor::scalar_f32(-0.0f))), "plus_neg_zero");
  g.add_output(g.sub(x, g.constant(Tensor::scalar_f32(0))), "minus_zero");
  const Graph f = dce(remove_trivial_ops(g));
  EXPECT_EQ(count_op(f, "binary"), 3u);  // the first three stay
  const auto ref = expect_exact(g, [](const Graph& h) { return dce(remove_trivial_ops(h)); },
                                {{"x", Tensor::f32({4}, std::vector<float>{-0.0f, 0.0f, 1.0f, -2.0f})}});
  EXPECT_FALSE(std::signbit(testing::to_doubles(ref[0])[0]));  // -0.0 + 0.0 = +0.0
  EXPECT_TRUE(std::signbit(testing::to_doubles(ref[3])[0]));   // -0.0 + -0.0 = -0.0
}

TEST(FusionExactness, IntegerAddZeroIsRemoved) {
  Graph g;
  Value x = g.input("x", Shape::of({3}, DType::I32));
  g.add_output(g.sub(g.add(x, g.constant(Tensor::i32({}, std::vector<int32_t>{0}))),
                     g.constant(Tensor::i32({}, std::vector<int32_t>{0}))));
  EXPECT_EQ(count_op(dce(remove_trivial_ops(g)), "binary"), 0u);
}

// ---- zero-size axes at compile time -----------------------------------------------------------

TEST(FusionExactness, RmsNormReshapeWithZeroSizeLastAxis) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3, 0}));
  Value y = g.rms_norm(x, g.input("g", Shape::of({0})));
  g.add_output(g.reshape(y, {6, 0}));
  const Graph f = fuse_rms_norm_reshape(g);  // used to divide by the zero last axis (SIGFPE)
  EXPECT_EQ(count_op(f, "rms_norm"), 1u);
  const NamedTensors ins{{"x", Tensor::zeros(DType::F32, {2, 3, 0})}, {"g", Tensor::zeros(DType::F32, {0})}};
  const auto out = run_graph(g, true, ins, {});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{6, 0}));
}

TEST(FusionExactness, RmsNormReshapeFiresAndNearMisses) {
  auto build = [](std::vector<int64_t> xd, std::vector<Dim> to) {
    Graph g;
    Value x = g.input("x", Shape::from(xd));
    g.add_output(g.reshape(g.rms_norm(x, g.input("g", Shape::of({xd.back()}))), std::move(to)));
    return g;
  };
  auto fired = [](const Graph& g) {  // after the pass the reshape feeds the norm
    const Graph f = fuse_rms_norm_reshape(g);
    return std::holds_alternative<ops::RmsNorm>(f.node(f.outputs()[0].node).op);
  };
  EXPECT_TRUE(fired(build({2, 3, 4}, {6, 4})));
  EXPECT_TRUE(fired(build({0, 3, 4}, {0, 4})));  // zero rows: still a valid flatten
  EXPECT_FALSE(fired(build({2, 3, 4}, {4, 6})));  // not a flatten of the leading axes
  EXPECT_FALSE(fired(build({2, 3, 4}, {2, 12})));
  EXPECT_FALSE(fired(build({2, 3, 0}, {6, 0})));
  for (const auto& [xd, to] : std::vector<std::pair<std::vector<int64_t>, std::vector<Dim>>>{
           {{2, 3, 4}, {6, 4}}, {{2, 3, 4}, {4, 6}}, {{0, 3, 4}, {0, 4}}}) {
    const Graph g = build(xd, to);
    expect_exact(g, pass_fn(fuse_rms_norm_reshape),
                 {{"x", testing::random_tensor(DType::F32, xd, 1, -3, 3)},
                  {"g", testing::random_tensor(DType::F32, {xd.back()}, 2, -1, 1)}});
  }
}

// ---- near misses: multi-use intermediates and broadcasting -----------------------------------

TEST(FusionExactness, SumThatIsAlsoAnOutputKeepsItsActivationSeparate) {
  Graph g;
  Value x = g.input("x", Shape::of({3, 4}, DType::I8));
  Value w = g.input("w", Shape::of({4, 2}, DType::I8));
  Value s = g.add(g.matmul(x, w), g.input("b", Shape::of({2}, DType::I8)));
  g.add_output(s);
  g.add_output(g.relu(s));
  const Graph f = fuse_matmul_bias_act(g);
  EXPECT_EQ(count_op(f, "fused_matmul_bias_act"), 1u);
  EXPECT_EQ(count_op(f, "activation"), 1u);  // the relu stays: the sum is needed on its own
  const NamedTensors ins{{"x", testing::random_tensor(DType::I8, {3, 4}, 1, -128, 127)},
                         {"w", testing::random_tensor(DType::I8, {4, 2}, 2, -128, 127)},
                         {"b", testing::random_tensor(DType::I8, {2}, 3, -128, 127)}};
  expect_exact(g, both_matmul_passes, ins);
}

TEST(FusionExactness, BroadcastingResidualIsNotFused) {
  Graph g;
  Value x = g.input("x", Shape::of({3, 4}));
  Value mm = g.matmul(x, g.input("w", Shape::of({4, 2})));
  g.add_output(g.add(mm, g.input("r", Shape::of({1, 2}))));  // rank 2: neither a bias nor a residual
  const Graph f = both_matmul_passes(g);
  EXPECT_EQ(count_op(f, "fused_matmul_bias_act"), 0u);
  expect_exact(g, both_matmul_passes,
               {{"x", testing::random_tensor(DType::F32, {3, 4}, 1)},
                {"w", testing::random_tensor(DType::F32, {4, 2}, 2)},
                {"r", testing::random_tensor(DType::F32, {1, 2}, 3)}});
}

TEST(FusionExactness, ScalarBiasOfRankZero) {
  for (DType dt : {DType::F32, DType::I16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g;
    Value x = g.input("x", Shape::of({3, 4}, dt));
    Value mm = g.matmul(x, g.input("w", Shape::of({4, 5}, dt)));
    g.add_output(g.relu(g.add(g.input("b", Shape::of({}, dt)), mm)));
    EXPECT_EQ(count_op(fuse_matmul_bias_act(g), "fused_matmul_bias_act"), 1u);
    expect_exact(g, both_matmul_passes,
                 {{"x", testing::random_tensor(dt, {3, 4}, 1, -100, 100)},
                  {"w", testing::random_tensor(dt, {4, 5}, 2, -100, 100)},
                  {"b", testing::random_tensor(dt, {}, 3, -100, 100)}});
  }
}

}  // namespace
}  // namespace rlx
