// Exporter patterns (passes/exporter.h): fold_conv_affine, fuse_gelu, fuse_silu, fuse_layer_norm,
// fuse_rms_norm, fuse_attention. Each fires on every spelling, leaves near misses alone and
// keeps the numbers (CPU, before vs after the pass).
#include <cmath>
#include <limits>

#include "passes/exporter.h"
#include "passes/fusion.h"
#include "passes/hoist.h"
#include "passes/pass_test_util.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using namespace passes;
using testing::count_op;
using testing::pass_fn;
using testing::same_numbers;

const ops::Attention& attention_of(const Graph& g) {
  for (const Node& n : g.nodes())
    if (const auto* a = std::get_if<ops::Attention>(&n.op)) return *a;
  throw Error("no attention node");
}
ActKind act_of(const Graph& g) { return std::get<ops::Activation>(g.node(g.outputs()[0].node).op).kind; }

// ---- GELU ----------------------------------------------------------------------------------

enum class GeluSpelling { HfErf, TorchErf, HalfFirst, DivTwo, TanhPow, TanhCube, FastTanh };

Graph gelu_graph(GeluSpelling s, double half = 0.5, double root2 = 1.4142135, double cubic = 0.044715,
                 bool extra_use = false) {
  Graph g;
  Value x = g.input("x", Shape::of({4, 16}));
  auto c = [&](double v) { return g.scalar(v); };
  Value y, t;
  switch (s) {
    case GeluSpelling::HfErf:  // x * 0.5 * (1 + erf(x / sqrt(2)))
      t = g.add(c(1), g.act(ActKind::Erf, g.div(x, c(root2))));
      y = g.mul(g.mul(x, c(half)), t);
      break;
    case GeluSpelling::TorchErf:  // (x * (erf(x * 0.7071) + 1)) * 0.5
      t = g.add(g.act(ActKind::Erf, g.mul(x, c(1 / root2))), c(1));
      y = g.mul(g.mul(x, t), c(half));
      break;
    case GeluSpelling::HalfFirst:  // x * (0.5 * (1 + erf(..)))
      t = g.add(c(1), g.act(ActKind::Erf, g.mul(c(1 / root2), x)));
      y = g.mul(x, g.mul(c(half), t));
      break;
    case GeluSpelling::DivTwo:  // (x * (1 + erf(..))) / 2
      t = g.add(c(1), g.act(ActKind::Erf, g.div(x, c(root2))));
      y = g.div(g.mul(t, x), c(1 / half));
      break;
    case GeluSpelling::TanhPow:
    case GeluSpelling::TanhCube: {  // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
      Value x3 = s == GeluSpelling::TanhPow ? g.pow(x, c(3)) : g.mul(g.mul(x, x), x);
      Value inner = g.mul(c(std::sqrt(2 / M_PI)), g.add(x, g.mul(c(cubic), x3)));
      t = g.add(c(1), g.tanh(inner));
      y = g.mul(g.mul(c(half), x), t);
      break;
    }
    case GeluSpelling::FastTanh: {  // 0.5 * x * (1 + tanh(x * 0.79788 * (1 + 0.044715 * x * x)))
      Value inner = g.mul(g.mul(x, c(0.7978845608)), g.add(c(1), g.mul(g.mul(c(cubic), x), x)));
      t = g.add(c(1), g.tanh(inner));
      y = g.mul(g.mul(c(half), x), t);
      break;
    }
  }
  g.add_output(y);
  if (extra_use) g.add_output(t);
  return g;
}

TEST(FuseGelu, FiresOnEverySpelling) {
  for (auto s : {GeluSpelling::HfErf, GeluSpelling::TorchErf, GeluSpelling::HalfFirst, GeluSpelling::DivTwo}) {
    Graph g = gelu_graph(s);
    Graph f = fuse_gelu(g);
    EXPECT_EQ(testing::count_op(f, "activation"), 1u) << static_cast<int>(s);
    EXPECT_EQ(count_op(f, "binary"), 0u) << static_cast<int>(s);
    EXPECT_EQ(act_of(f), ActKind::Gelu);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_gelu)));
  }
  for (auto s : {GeluSpelling::TanhPow, GeluSpelling::TanhCube, GeluSpelling::FastTanh}) {
    Graph g = gelu_graph(s);
    Graph f = fuse_gelu(g);
    EXPECT_EQ(count_op(f, "activation"), 1u) << static_cast<int>(s);
    EXPECT_EQ(count_op(f, "binary"), 0u) << static_cast<int>(s);
    EXPECT_EQ(act_of(f), ActKind::GeluApprox);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_gelu)));
  }
  // sqrt(2) to double precision fires too.
  EXPECT_EQ(count_op(fuse_gelu(gelu_graph(GeluSpelling::HfErf, 0.5, std::sqrt(2.0))), "binary"), 0u);
}

TEST(FuseGelu, NearMissesDoNotFire) {
  for (const Graph& g : {gelu_graph(GeluSpelling::HfErf, 0.49), gelu_graph(GeluSpelling::TorchErf, 0.5, 1.5),
                         gelu_graph(GeluSpelling::HfErf, 0.5, 1.4142135, 0.044715, true),
                         gelu_graph(GeluSpelling::TanhPow, 0.5, 1.4142135, 0.05),
                         gelu_graph(GeluSpelling::HfErf, 0.5, 1.41421)})  // a 4e-6 relative error
    EXPECT_EQ(count_op(fuse_gelu(g), "binary"), count_op(g, "binary"));
  {  // erf of another tensor
    Graph g;
    Value x = g.input("x", Shape::of({4, 16})), z = g.input("z", Shape::of({4, 16}));
    Value t = g.add(g.scalar(1), g.act(ActKind::Erf, g.div(z, g.scalar(1.4142135))));
    g.add_output(g.mul(g.mul(x, g.scalar(0.5)), t));
    EXPECT_EQ(count_op(fuse_gelu(g), "binary"), 4u);
  }
}

// ---- SiLU ----------------------------------------------------------------------------------

TEST(FuseSilu, FiresEitherOrderAndSkipsNearMisses) {
  for (bool sig_first : {false, true}) {
    Graph g;
    Value x = g.input("x", Shape::of({4, 16}));
    g.add_output(sig_first ? g.mul(g.sigmoid(x), x) : g.mul(x, g.sigmoid(x)));
    Graph f = fuse_silu(g);
    EXPECT_EQ(count_op(f, "binary"), 0u);
    EXPECT_EQ(act_of(f), ActKind::Silu);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_silu)));
  }
  {  // sigmoid of another value
    Graph g;
    Value x = g.input("x", Shape::of({4, 16})), z = g.input("z", Shape::of({4, 16}));
    g.add_output(g.mul(x, g.sigmoid(z)));
    EXPECT_EQ(count_op(fuse_silu(g), "binary"), 1u);
  }
  {  // the sigmoid is read twice
    Graph g;
    Value x = g.input("x", Shape::of({4, 16}));
    Value s = g.sigmoid(x);
    g.add_output(g.mul(x, s));
    g.add_output(s);
    EXPECT_EQ(count_op(fuse_silu(g), "binary"), 1u);
  }
  {  // SwiGLU written as x@Wg * sigmoid(x@Wg) * (x@Wu): the pipeline ends in FusedSwiGLU
    Graph g;
    Value x = g.input("x", Shape::of({4, 16}));
    Value gate = g.matmul(x, g.param("wg", Shape::of({16, 32})));
    Value up = g.matmul(x, g.param("wu", Shape::of({16, 32})));
    g.add_output(g.mul(g.mul(gate, g.sigmoid(gate)), up));
    CompileOptions o;
    auto be = make_backend(Device::Cpu, o);
    Graph opt = passes::optimize(g, *be, o);
    EXPECT_EQ(count_op(opt, "fused_swiglu"), 1u);
    EXPECT_EQ(count_op(opt, "activation"), 0u);
  }
}

// ---- norms ---------------------------------------------------------------------------------

enum class Rsqrt { SqrtDiv, Rsqrt, RecipSqrt, OneOverSqrt, PowHalf };

// d * rsqrt(ms + eps) in one of the spellings.
Value normalize(Graph& g, Value d, Value ms, double eps, Rsqrt how) {
  const DType dt = g.shape(d).dtype;
  Value a = g.add(ms, g.scalar(eps, dt));
  switch (how) {
    case Rsqrt::SqrtDiv: return g.div(d, g.act(ActKind::Sqrt, a));
    case Rsqrt::Rsqrt: return g.mul(d, g.act(ActKind::Rsqrt, a));
    case Rsqrt::RecipSqrt: return g.mul(g.act(ActKind::Reciprocal, g.act(ActKind::Sqrt, a)), d);
    case Rsqrt::OneOverSqrt: return g.mul(d, g.div(g.scalar(1, dt), g.act(ActKind::Sqrt, a)));
    case Rsqrt::PowHalf: return g.mul(d, g.pow(a, g.scalar(-0.5, dt)));
  }
  return d;
}

Graph rms_graph(Rsqrt how, bool pow, bool weight, int64_t axis = -1, bool mean = true, bool extra = false) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 5, 16}));
  Value sq = pow ? g.pow(x, g.scalar(2)) : g.mul(x, x);
  Value ms = mean ? g.mean(sq, {axis}, true) : g.sum(sq, {axis}, true);
  Value y = normalize(g, x, ms, 1e-6, how);
  if (weight) y = g.mul(g.param("w", Shape::of({16})), y);
  g.add_output(y);
  if (extra) g.add_output(sq);
  return g;
}

TEST(FuseRmsNorm, FiresOnEverySpelling) {
  for (Rsqrt how : {Rsqrt::SqrtDiv, Rsqrt::Rsqrt, Rsqrt::RecipSqrt, Rsqrt::OneOverSqrt, Rsqrt::PowHalf})
    for (bool pow : {true, false})
      for (bool weight : {true, false}) {
        Graph g = rms_graph(how, pow, weight);
        Graph f = fuse_rms_norm(g);
        EXPECT_EQ(count_op(f, "rms_norm"), 1u) << static_cast<int>(how) << pow << weight;
        EXPECT_EQ(passes::op_count(f), 1u);
        const auto& rn = std::get<ops::RmsNorm>(f.node(f.outputs()[0].node).op);
        EXPECT_DOUBLE_EQ(rn.eps, static_cast<double>(1e-6f));
        EXPECT_TRUE(same_numbers(g, pass_fn(fuse_rms_norm)));
      }
}

TEST(FuseRmsNorm, LlamaCastsToF32AndBack) {
  for (DType dt : {DType::F16, DType::BF16}) {
    Graph g;
    Value x = g.input("x", Shape::of({2, 5, 16}, dt));
    Value x32 = g.cast(x, DType::F32);
    Value ms = g.mean(g.pow(x32, g.scalar(2)), {-1}, true);
    Value y = g.cast(normalize(g, x32, ms, 1e-5, Rsqrt::RecipSqrt), dt);
    g.add_output(g.mul(g.param("w", Shape::of({16}, dt)), y));
    Graph f = fuse_rms_norm(g);
    EXPECT_EQ(count_op(f, "rms_norm"), 1u);
    EXPECT_EQ(count_op(f, "cast"), 0u);
    EXPECT_EQ(f.shape(f.outputs()[0]).dtype, dt);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_rms_norm)));
  }
}

TEST(FuseRmsNorm, NearMissesDoNotFire) {
  EXPECT_EQ(count_op(fuse_rms_norm(rms_graph(Rsqrt::Rsqrt, true, true, 1)), "rms_norm"), 0u);          // axis
  EXPECT_EQ(count_op(fuse_rms_norm(rms_graph(Rsqrt::Rsqrt, true, true, -1, false)), "rms_norm"), 0u);  // sum
  EXPECT_EQ(count_op(fuse_rms_norm(rms_graph(Rsqrt::Rsqrt, true, true, -1, true, true)), "rms_norm"), 0u);
  {  // eps is an input, not a constant
    Graph g;
    Value x = g.input("x", Shape::of({2, 16}));
    Value e = g.input("eps", Shape::of({}));
    g.add_output(g.mul(x, g.act(ActKind::Rsqrt, g.add(g.mean(g.mul(x, x), {-1}, true), e))));
    EXPECT_EQ(count_op(fuse_rms_norm(g), "rms_norm"), 0u);
  }
  {  // normalizes another tensor than the one squared
    Graph g;
    Value x = g.input("x", Shape::of({2, 16})), z = g.input("z", Shape::of({2, 16}));
    g.add_output(g.mul(z, g.act(ActKind::Rsqrt, g.add(g.mean(g.mul(x, x), {-1}, true), g.scalar(1e-6)))));
    EXPECT_EQ(count_op(fuse_rms_norm(g), "rms_norm"), 0u);
  }
  {  // a weight that is not per feature ([5, 16]) stays a Mul after the norm
    Graph g;
    Value x = g.input("x", Shape::of({5, 16}));
    Value y = normalize(g, x, g.mean(g.mul(x, x), {-1}, true), 1e-6, Rsqrt::Rsqrt);
    g.add_output(g.mul(y, g.param("w", Shape::of({5, 16}))));
    Graph f = fuse_rms_norm(g);
    EXPECT_EQ(count_op(f, "rms_norm"), 1u);
    EXPECT_EQ(count_op(f, "binary"), 1u);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_rms_norm)));
  }
}

Graph ln_graph(Rsqrt how, bool pow, bool gamma, bool beta, int64_t axis2 = -1) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 5, 16}));
  Value d = g.sub(x, g.mean(x, {-1}, true));
  Value var = g.mean(pow ? g.pow(d, g.scalar(2)) : g.mul(d, d), {axis2}, true);
  Value y = normalize(g, d, var, 1e-5, how);
  if (gamma) y = g.mul(y, g.param("gamma", Shape::of({16})));
  if (beta) y = g.add(y, g.param("beta", Shape::of({16})));
  g.add_output(y);
  return g;
}

TEST(FuseLayerNorm, FiresOnEverySpelling) {
  for (Rsqrt how : {Rsqrt::SqrtDiv, Rsqrt::Rsqrt, Rsqrt::RecipSqrt})
    for (bool pow : {true, false})
      for (int affine = 0; affine < 4; ++affine) {
        Graph g = ln_graph(how, pow, affine & 1, affine & 2);
        Graph f = fuse_layer_norm(g);
        EXPECT_EQ(count_op(f, "layer_norm"), 1u) << static_cast<int>(how) << pow << affine;
        EXPECT_EQ(passes::op_count(f), 1u);
        EXPECT_EQ(f.node(f.outputs()[0].node).inputs.size(), (affine & 2) ? 3u : 2u);
        EXPECT_TRUE(same_numbers(g, pass_fn(fuse_layer_norm)));
      }
}

TEST(FuseLayerNorm, ComputedInF32BetweenCasts) {
  for (DType dt : {DType::F16, DType::BF16}) {
    Graph g;
    Value x = g.input("x", Shape::of({2, 5, 16}, dt));
    Value x32 = g.cast(x, DType::F32);
    Value d = g.sub(x32, g.mean(x32, {-1}, true));
    Value y = g.cast(normalize(g, d, g.mean(g.mul(d, d), {-1}, true), 1e-5, Rsqrt::SqrtDiv), dt);
    g.add_output(g.add(g.mul(y, g.param("gamma", Shape::of({16}, dt))), g.param("beta", Shape::of({16}, dt))));
    Graph f = fuse_layer_norm(g);
    EXPECT_EQ(count_op(f, "layer_norm"), 1u);
    EXPECT_EQ(passes::op_count(f), 1u);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_layer_norm)));
  }
}

TEST(FuseLayerNorm, NearMissesDoNotFire) {
  EXPECT_EQ(count_op(fuse_layer_norm(ln_graph(Rsqrt::SqrtDiv, true, true, true, 1)), "layer_norm"), 0u);
  {  // the centered value is read outside the pattern
    Graph g;
    Value x = g.input("x", Shape::of({2, 16}));
    Value d = g.sub(x, g.mean(x, {-1}, true));
    g.add_output(normalize(g, d, g.mean(g.mul(d, d), {-1}, true), 1e-5, Rsqrt::SqrtDiv));
    g.add_output(g.relu(d));
    EXPECT_EQ(count_op(fuse_layer_norm(g), "layer_norm"), 0u);
  }
  {  // the mean of another tensor
    Graph g;
    Value x = g.input("x", Shape::of({2, 16})), z = g.input("z", Shape::of({2, 16}));
    Value d = g.sub(x, g.mean(z, {-1}, true));
    g.add_output(normalize(g, d, g.mean(g.mul(d, d), {-1}, true), 1e-5, Rsqrt::SqrtDiv));
    EXPECT_EQ(count_op(fuse_layer_norm(g), "layer_norm"), 0u);
  }
}

// ---- attention -----------------------------------------------------------------------------

enum class Mask { None, Input, CausalAdd, CausalWhere, UpperAdd, UpperWhere, Growing };
enum class Scale { Div, MulLeft, MulRight, None, InputScale, PreScaled };

struct AttnSpec {
  Mask mask = Mask::None;
  Scale scale = Scale::Div;
  int64_t softmax_axis = -1;
  bool scores_output = false, probs_output = false;
  int64_t kv_heads = 4;
  DType dt = DType::F32;
};

constexpr int64_t kB = 2, kS = 6, kH = 4, kD = 8;

// The exporter layout: x (B, S, E) -> reshape (B, S, H, D) -> transpose to (B, H, S, D); K
// transposed to (B, H, D, S) in one Transpose; the result back to (B, S, E).
Graph exported_attention(const AttnSpec& s) {
  Graph g;
  const DType dt = s.dt;
  Value q = g.input("q", Shape::of({kB, kS, kH * kD}, dt));
  Value k = g.input("k", Shape::of({kB, kS, s.kv_heads * kD}, dt));
  Value v = g.input("v", Shape::of({kB, kS, s.kv_heads * kD}, dt));
  Value qh = g.transpose(g.reshape(q, {kB, kS, kH, kD}), {0, 2, 1, 3});
  Value kt = g.transpose(g.reshape(k, {kB, kS, s.kv_heads, kD}), {0, 2, 3, 1});
  Value vh = g.transpose(g.reshape(v, {kB, kS, s.kv_heads, kD}), {0, 2, 1, 3});
  if (s.scale == Scale::PreScaled) {  // torch's scaled_dot_product_attention export
    const double r = std::sqrt(1 / std::sqrt(double(kD)));
    qh = g.mul(qh, g.scalar(r, dt));
    kt = g.mul(g.scalar(r, dt), kt);
  }
  Value sc = g.matmul(qh, kt);
  if (s.scores_output) g.add_output(sc);
  switch (s.scale) {
    case Scale::Div: sc = g.div(sc, g.scalar(std::sqrt(double(kD)), dt)); break;
    case Scale::MulLeft: sc = g.mul(g.scalar(0.3, dt), sc); break;
    case Scale::MulRight: sc = g.mul(sc, g.scalar(0.3, dt)); break;
    case Scale::None:
    case Scale::PreScaled: break;
    case Scale::InputScale: sc = g.mul(sc, g.input("scale", Shape::of({}, dt))); break;
  }
  const float lowest = std::numeric_limits<float>::lowest();
  auto tri = [&](bool upper_keep, double keep_v, double drop_v) {
    std::vector<double> m(kS * kS);
    for (int64_t i = 0; i < kS; ++i)
      for (int64_t j = 0; j < kS; ++j) m[i * kS + j] = ((upper_keep ? j >= i : j <= i) ? keep_v : drop_v);
    return Tensor::f64({1, 1, kS, kS}, m);
  };
  switch (s.mask) {
    case Mask::None: break;
    case Mask::Input: sc = g.add(sc, g.input("mask", Shape::of({kB, 1, 1, kS}, dt))); break;
    case Mask::CausalAdd: sc = g.add(g.constant(tri(false, 0, lowest).cast(dt)), sc); break;
    case Mask::UpperAdd: sc = g.add(sc, g.constant(tri(true, 0, lowest).cast(dt))); break;
    case Mask::CausalWhere:
    case Mask::UpperWhere:
      sc = g.where(g.constant(tri(s.mask == Mask::UpperWhere, 1, 0).cast(DType::Bool)), sc,
                   g.scalar(-std::numeric_limits<double>::infinity(), dt));
      break;
    case Mask::Growing: sc = g.add(sc, g.input("mask", Shape::of({3, 1, 1, 1, kS}, dt))); break;
  }
  Value p = g.softmax(sc, s.softmax_axis);
  if (s.probs_output) g.add_output(p);
  Value o = g.matmul(p, vh);
  const int64_t lead = s.mask == Mask::Growing ? 3 : 1;
  if (lead == 1) o = g.reshape(g.transpose(o, {0, 2, 1, 3}), {kB, kS, kH * kD});
  g.add_output(o);
  return g;
}

TEST(FuseAttention, ExportedLayoutBecomesBshdAttention) {
  for (Scale sc : {Scale::Div, Scale::MulLeft, Scale::MulRight, Scale::None, Scale::PreScaled})
    for (Mask m : {Mask::None, Mask::Input, Mask::CausalAdd, Mask::CausalWhere, Mask::UpperAdd}) {
      AttnSpec s;
      s.scale = sc;
      s.mask = m;
      Graph g = exported_attention(s);
      Graph f = fuse_attention(g);
      ASSERT_EQ(count_op(f, "attention"), 1u) << static_cast<int>(sc) << " " << static_cast<int>(m);
      EXPECT_EQ(count_op(f, "softmax") + count_op(f, "matmul") + count_op(f, "transpose"), 0u);
      const auto& a = attention_of(f);
      EXPECT_EQ(a.layout, AttnLayout::BSHD);
      EXPECT_EQ(a.num_heads, kH);
      EXPECT_EQ(a.head_dim, kD);
      const double want = sc == Scale::Div || sc == Scale::PreScaled ? 1 / std::sqrt(double(kD))
                          : sc == Scale::None                        ? 1.0
                                                                     : double(0.3f);
      EXPECT_NEAR(a.score_scale, want, 1e-7);
      const MaskKind mk = m == Mask::None ? MaskKind::None
                          : m == Mask::CausalAdd || m == Mask::CausalWhere ? MaskKind::Causal
                                                                           : MaskKind::Bias;
      EXPECT_EQ(a.mask_kind, mk);
      EXPECT_TRUE(same_numbers(g, pass_fn(fuse_attention), 1e-4));
    }
}

TEST(FuseAttention, BhsdKTransposeMqaGqaRankThreeAndF16) {
  {  // q, k, v given in (B, H, S, D); K transposed by its own (0, 1, 3, 2) Transpose
    Graph g;
    Value q = g.input("q", Shape::of({kB, kH, kS, kD})), k = g.input("k", Shape::of({kB, kH, kS, kD}));
    Value v = g.input("v", Shape::of({kB, kH, kS, kD}));
    Value sc = g.mul(g.matmul(q, g.transpose(k, {0, 1, 3, 2})), g.scalar(0.25));
    g.add_output(g.matmul(g.softmax(sc, 3), v));
    Graph f = fuse_attention(g);
    ASSERT_EQ(count_op(f, "attention"), 1u);
    EXPECT_EQ(count_op(f, "transpose"), 0u);
    EXPECT_EQ(attention_of(f).layout, AttnLayout::BHSD);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_attention), 1e-4));
  }
  {  // MQA: one K/V head broadcast over the query heads
    AttnSpec s;
    s.kv_heads = 1;
    Graph g = exported_attention(s);
    Graph f = fuse_attention(g);
    ASSERT_EQ(count_op(f, "attention"), 1u);
    EXPECT_EQ(attention_of(f).num_kv_heads, 1);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_attention), 1e-4));
  }
  {  // GQA: k and v of 2 heads repeated to 4 by the exporter's repeat_kv (Unsqueeze, Expand, Reshape)
    Graph g;
    Value q = g.input("q", Shape::of({kB, kH, kS, kD}));
    auto repeat = [&](Value x) {
      Value e = g.expand(g.reshape(x, {kB, 2, 1, kS, kD}), {kB, 2, 2, kS, kD});
      return g.reshape(e, {kB, kH, kS, kD});
    };
    Value k = repeat(g.input("k", Shape::of({kB, 2, kS, kD}))), v = repeat(g.input("v", Shape::of({kB, 2, kS, kD})));
    Value sc = g.div(g.matmul(q, g.transpose(k, {0, 1, 3, 2})), g.scalar(std::sqrt(double(kD))));
    g.add_output(g.matmul(g.softmax(sc), v));
    Graph f = fuse_attention(g);
    ASSERT_EQ(count_op(f, "attention"), 1u);
    EXPECT_EQ(count_op(f, "expand") + count_op(f, "reshape") + count_op(f, "transpose"), 0u);
    EXPECT_EQ(attention_of(f).num_kv_heads, 2);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_attention), 1e-4));
  }
  {  // rank 3 (batch * heads, S, D) with a pre-transposed constant K (D, S) per head
    Graph g;
    Value q = g.input("q", Shape::of({kH, kS, kD}));
    Value kt = g.constant(testing::random_tensor(DType::F32, {kH, kD, kS + 2}, 7));
    Value v = g.input("v", Shape::of({kH, kS + 2, kD}));
    g.add_output(g.matmul(g.softmax(g.div(g.matmul(q, kt), g.scalar(2.0))), v));
    Graph f = fuse_attention(g);
    ASSERT_EQ(count_op(f, "attention"), 1u);
    EXPECT_EQ(f.shape(f.outputs()[0]), Shape::of({kH, kS, kD}));
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_attention), 1e-4));
  }
  for (DType dt : {DType::F16, DType::BF16}) {  // softmax(s.float()).to(dt), as Llama's eager attention
    Graph g;
    Value q = g.input("q", Shape::of({kB, kH, kS, kD}, dt)), k = g.input("k", Shape::of({kB, kH, kS, kD}, dt));
    Value v = g.input("v", Shape::of({kB, kH, kS, kD}, dt));
    Value sc = g.add(g.div(g.matmul(q, g.transpose(k, {0, 1, 3, 2})), g.scalar(std::sqrt(double(kD)), dt)),
                     g.input("mask", Shape::of({kB, 1, kS, kS}, dt)));
    g.add_output(g.matmul(g.cast(g.softmax(g.cast(sc, DType::F32)), dt), v));
    Graph f = fuse_attention(g);
    ASSERT_EQ(count_op(f, "attention"), 1u);
    EXPECT_EQ(count_op(f, "cast") + count_op(f, "softmax"), 0u);
    EXPECT_EQ(attention_of(f).mask_kind, MaskKind::Bias);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_attention)));
  }
  {  // f16 with a causal mask of f16's lowest value
    AttnSpec s;
    s.dt = DType::F16;
    s.mask = Mask::CausalAdd;
    Graph g = exported_attention(s);
    Graph f = fuse_attention(g);
    ASSERT_EQ(count_op(f, "attention"), 1u);
    EXPECT_EQ(attention_of(f).mask_kind, MaskKind::Causal);
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_attention)));
  }
}

TEST(FuseAttention, NearMissesDoNotFire) {
  auto fires = [](const AttnSpec& s) { return count_op(fuse_attention(exported_attention(s)), "attention"); };
  AttnSpec s;
  s.softmax_axis = -2;  // softmax over the queries
  EXPECT_EQ(fires(s), 0u);
  s = {};
  s.scale = Scale::InputScale;  // scale not a constant
  EXPECT_EQ(fires(s), 0u);
  s = {};
  s.mask = Mask::Growing;  // the mask broadcasts the scores to a higher rank
  EXPECT_EQ(fires(s), 0u);
  s = {};
  s.scores_output = true;  // the scores have a second reader
  EXPECT_EQ(fires(s), 0u);
  s = {};
  s.probs_output = true;  // so do the probabilities
  EXPECT_EQ(fires(s), 0u);
  s = {};
  s.mask = Mask::UpperWhere;  // a Where that is not causal
  EXPECT_EQ(fires(s), 0u);
  {  // value head dim differs from the query's
    Graph g;
    Value q = g.input("q", Shape::of({kB, kH, kS, kD})), k = g.input("k", Shape::of({kB, kH, kD, kS}));
    Value v = g.input("v", Shape::of({kB, kH, kS, 2 * kD}));
    g.add_output(g.matmul(g.softmax(g.matmul(q, k)), v));
    EXPECT_EQ(count_op(fuse_attention(g), "attention"), 0u);
  }
}

// ---- Conv + BatchNorm / per-channel affine -------------------------------------------------

Graph conv_graph(bool bias, int tail, bool param_weight = false, bool extra_use = false, bool bn_param = false,
                 bool param_bias = false, bool computed_weight = false) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3, 9, 9}));
  Value w = param_weight ? g.param("w", Shape::of({8, 3, 3, 3}))
                         : g.constant(testing::random_tensor(DType::F32, {8, 3, 3, 3}, 1));
  if (computed_weight) w = g.act(ActKind::Neg, g.input("w_in", Shape::of({8, 3, 3, 3})));
  std::vector<Value> ins{x, w};
  if (bias)
    ins.push_back(param_bias ? g.param("b", Shape::of({8})) : g.constant(testing::random_tensor(DType::F32, {8}, 2)));
  Value y = g.apply(ops::Conv{{1, 1}, {1, 1, 1, 1}, {1, 1}, 1}, ins);
  Value c = y;
  auto vec = [&](uint64_t seed, double lo, double hi) {
    return g.constant(testing::random_tensor(DType::F32, {8}, seed, lo, hi));
  };
  if (tail == 0 || tail == 2) {
    Value scale = bn_param ? g.param("bn_scale", Shape::of({8})) : vec(3, 0.5, 2);
    y = g.apply(ops::BatchNormInference{1e-3}, {y, scale, vec(4, -1, 1), vec(5, -1, 1), vec(6, 0.1, 2)});
  }
  if (tail == 1 || tail == 2) {
    y = g.mul(y, g.constant(testing::random_tensor(DType::F32, {8, 1, 1}, 7, 0.5, 2)));
    y = g.add(g.constant(testing::random_tensor(DType::F32, {1, 8, 1, 1}, 8)), y);
    y = g.div(y, g.scalar(2.0));
  }
  if (tail == 3) y = g.add(y, g.constant(testing::random_tensor(DType::F32, {1, 1, 9}, 9)));  // varies along W
  g.add_output(y);
  if (extra_use) g.add_output(c);
  return g;
}

TEST(FoldConvAffine, BatchNormAndPerChannelConstantsFoldIntoTheConv) {
  for (bool bias : {false, true})
    for (int tail : {0, 1, 2}) {
      Graph g = conv_graph(bias, tail);
      Graph f = fold_conv_affine(g);
      EXPECT_EQ(count_op(f, "conv"), 1u);
      EXPECT_EQ(passes::op_count(f), 1u) << bias << tail;
      EXPECT_TRUE(same_numbers(g, pass_fn(fold_conv_affine), 1e-5));
    }
}

// A Param weight (what the ONNX importer makes of any initializer over 4 KiB) and a Param bias
// fold too: the conv reads Mul(w, a) and Add(Mul(b, a), t), which depend on Params and Constants
// alone, so the session's weight prologue computes them once (hoist_param_computations).
TEST(FoldConvAffine, ParamWeightAndBiasFoldThroughTheWeightPrologue) {
  for (bool bias : {false, true})
    for (bool param_bias : {false, true})
      for (int tail : {0, 1, 2}) {
        if (param_bias && !bias) continue;
        SCOPED_TRACE(std::to_string(bias) + std::to_string(param_bias) + std::to_string(tail));
        Graph g = conv_graph(bias, tail, true, false, false, param_bias);
        Graph f = fold_conv_affine(g);
        EXPECT_EQ(count_op(f, "conv"), 1u);
        EXPECT_EQ(count_op(f, "batch_norm_inference"), 0u);
        const passes::HoistedGraph h = passes::hoist_param_computations(f);
        EXPECT_EQ(h.derived.size(), param_bias ? 2u : 1u);  // the scaled weight (and bias)
        EXPECT_EQ(passes::op_count(h.main), 1u);            // the conv alone runs per call
        EXPECT_TRUE(same_numbers(g, pass_fn(fold_conv_affine), 1e-5));
      }
}

TEST(FoldConvAffine, NearMissesDoNotFire) {
  EXPECT_EQ(passes::op_count(fold_conv_affine(conv_graph(true, 0, false, false, false, false, true))),
            3u);  // weight computed per run (not a Param or Constant)
  EXPECT_EQ(passes::op_count(fold_conv_affine(conv_graph(true, 0, true, true))), 2u);  // Param weight, 2nd reader
  EXPECT_EQ(passes::op_count(fold_conv_affine(conv_graph(true, 0, false, true))), 2u);  // 2nd reader
  EXPECT_EQ(passes::op_count(fold_conv_affine(conv_graph(true, 0, false, false, true))), 2u);  // BN param
  EXPECT_EQ(passes::op_count(fold_conv_affine(conv_graph(true, 3))), 2u);  // not per channel
}

// ---- zero-size tensors: no division by a zero axis, no crash ------------------------------

TEST(ExporterPasses, ZeroSizeTensorsDoNotCrash) {
  {  // a conv with no output channels followed by a BN
    Graph g;
    Value x = g.input("x", Shape::of({1, 3, 4, 4}));
    Value y = g.apply(ops::Conv{}, {x, g.constant(Tensor::zeros(DType::F32, {0, 3, 1, 1}))});
    auto e = [&] { return g.constant(Tensor::zeros(DType::F32, {0})); };
    g.add_output(g.apply(ops::BatchNormInference{}, {y, e(), e(), e(), e()}));
    EXPECT_NO_THROW((void)fold_conv_affine(g));
  }
  {  // RMS and layer norms over a zero-size last axis stay spelled out
    Graph g;
    Value x = g.input("x", Shape::of({2, 0}));
    g.add_output(normalize(g, x, g.mean(g.mul(x, x), {-1}, true), 1e-6, Rsqrt::Rsqrt));
    Value d = g.sub(x, g.mean(x, {-1}, true));
    g.add_output(normalize(g, d, g.mean(g.mul(d, d), {-1}, true), 1e-6, Rsqrt::SqrtDiv));
    EXPECT_EQ(count_op(fuse_rms_norm(fuse_layer_norm(g)), "rms_norm") +
                  count_op(fuse_rms_norm(fuse_layer_norm(g)), "layer_norm"),
              0u);
  }
  {  // attention with no queries
    Graph g;
    Value q = g.input("q", Shape::of({1, 2, 0, 4})), k = g.input("k", Shape::of({1, 2, 3, 4}));
    g.add_output(g.matmul(g.softmax(g.matmul(q, g.transpose(k, {0, 1, 3, 2}))), g.input("v", Shape::of({1, 2, 3, 4}))));
    Graph f;
    EXPECT_NO_THROW(f = fuse_attention(g));
    EXPECT_TRUE(same_numbers(g, pass_fn(fuse_attention)));
  }
}

// ---- the pipeline --------------------------------------------------------------------------

TEST(ExporterPasses, RunInThePipelineAndCanBeDisabled) {
  AttnSpec s;
  s.mask = Mask::Input;
  Graph g = exported_attention(s);
  CompileOptions o;
  auto be = make_backend(Device::Cpu, o);
  EXPECT_EQ(count_op(passes::optimize(g, *be, o), "attention"), 1u);
  o.disabled_passes = {"fuse_attention"};
  EXPECT_EQ(count_op(passes::optimize(g, *be, o), "attention"), 0u);
  const auto names = passes::pipeline_pass_names();
  auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  EXPECT_LT(at("fuse_silu"), at("fuse_swiglu_dual_matmul"));
  EXPECT_LT(at("fuse_gelu"), at("fuse_matmul_bias_act"));
  EXPECT_LT(at("fuse_layer_norm"), at("fuse_rms_norm"));
  EXPECT_LT(at("fuse_rms_norm"), at("fuse_residual_rms_norm"));
  EXPECT_LT(at("fuse_layer_norm"), at("fuse_residual_ln"));
}

}  // namespace
}  // namespace rlx
