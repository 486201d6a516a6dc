// Exporter patterns on ONNX models built the way PyTorch exports them (opset 13, ops spelled
// out): after optimization for the CPU the fused ops appear, and the numbers match the
// unoptimized graph (the CPU oracle).
#include <cmath>

#include "passes/pass.h"

#include "onnx/onnx_builder.h"
#include "passes/pass_test_util.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using testing::count_op;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;
constexpr int64_t kS = 8, kE = 32, kH = 4, kD = 8;

Tensor weight(std::vector<int64_t> shape, uint64_t seed, double scale = 0.2) {
  return testing::random_tensor(DType::F32, std::move(shape), seed, -scale, scale);
}
Tensor scalar(float v) { return Tensor::scalar_f32(v); }
Tensor dims(std::vector<int64_t> d) { return Tensor::i64({static_cast<int64_t>(d.size())}, d); }

Graph optimize_cpu(const Graph& g) {
  CompileOptions o;
  auto be = make_backend(Device::Cpu, o);
  return passes::optimize(g, *be, o);
}

::testing::AssertionResult optimized_matches(const Graph& g) {
  testing::RunConfig a{"unoptimized", Device::Cpu, testing::unoptimized(), {}};
  testing::RunConfig b{"optimized", Device::Cpu, CompileOptions{}, {}};
  testing::ParityOptions po;
  po.tolerance = [](DType t) {
    auto tol = testing::parity_tolerance(t);
    if (t == DType::F32) tol = {1e-4, 1e-5};
    return tol;
  };
  const auto r = testing::compare_configs(g, a, b, po);
  if (r.pass) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.text;
}

// LayerNorm spelled out (torch.onnx before opset 17) on `x`, named with `p`.
void written_layer_norm(OnnxBuilder& b, const std::string& x, const std::string& p, const std::string& out) {
  set_attr(b.node("ReduceMean", {x}, {p + "mu"}), "axes", std::vector<int64_t>{-1});
  b.node("Sub", {x, p + "mu"}, {p + "d"});
  b.node("Pow", {p + "d", "two"}, {p + "d2"});
  set_attr(b.node("ReduceMean", {p + "d2"}, {p + "var"}), "axes", std::vector<int64_t>{-1});
  b.node("Add", {p + "var", "ln_eps"}, {p + "ve"});
  b.node("Sqrt", {p + "ve"}, {p + "sd"});
  b.node("Div", {p + "d", p + "sd"}, {p + "n"});
  b.node("Mul", {p + "n", p + "gamma"}, {p + "ng"});
  b.node("Add", {p + "ng", p + "beta"}, {out});
}

// A BERT encoder layer as torch.onnx.export writes it (opset 13): attention with an additive
// padding mask, LayerNorms and an erf GELU written out.
OnnxBuilder bert_layer_model() {
  OnnxBuilder b(13);
  b.input("x", kF32, {1, kS, kE}).input("mask", kF32, {1, 1, 1, kS}).output("y");
  b.initializer("two", scalar(2)).initializer("ln_eps", scalar(1e-12f)).initializer("sqrt_d", scalar(std::sqrt(8.f)));
  b.initializer("one", scalar(1)).initializer("half", scalar(0.5f)).initializer("sqrt2", scalar(1.4142135f));
  b.initializer("heads", dims({1, kS, kH, kD})).initializer("merged", dims({1, kS, kE}));
  uint64_t seed = 10;
  for (const char* w : {"wq", "wk", "wv", "wo"}) b.initializer(w, weight({kE, kE}, seed++));
  b.initializer("w1", weight({kE, 4 * kE}, seed++));
  b.initializer("w2", weight({4 * kE, kE}, seed++));
  for (const char* p : {"a", "f"}) {
    b.initializer(std::string(p) + "gamma", weight({kE}, seed++, 1.0));
    b.initializer(std::string(p) + "beta", weight({kE}, seed++, 1.0));
  }
  for (const char* t : {"q", "k", "v"}) {
    b.node("MatMul", {"x", std::string("w") + t}, {std::string(t) + "p"});
    b.node("Reshape", {std::string(t) + "p", "heads"}, {std::string(t) + "r"});
  }
  set_attr(b.node("Transpose", {"qr"}, {"qh"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
  set_attr(b.node("Transpose", {"kr"}, {"kt"}), "perm", std::vector<int64_t>{0, 2, 3, 1});
  set_attr(b.node("Transpose", {"vr"}, {"vh"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
  b.node("MatMul", {"qh", "kt"}, {"s"});
  b.node("Div", {"s", "sqrt_d"}, {"ss"});
  b.node("Add", {"ss", "mask"}, {"sm"});
  set_attr(b.node("Softmax", {"sm"}, {"p"}), "axis", int64_t{-1});
  b.node("MatMul", {"p", "vh"}, {"ctx"});
  set_attr(b.node("Transpose", {"ctx"}, {"ctxt"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
  b.node("Reshape", {"ctxt", "merged"}, {"ctxm"});
  b.node("MatMul", {"ctxm", "wo"}, {"ao"});
  b.node("Add", {"ao", "x"}, {"r1"});
  written_layer_norm(b, "r1", "a", "h1");
  b.node("MatMul", {"h1", "w1"}, {"f1"});
  b.node("Div", {"f1", "sqrt2"}, {"g1"});
  b.node("Erf", {"g1"}, {"g2"});
  b.node("Add", {"g2", "one"}, {"g3"});
  b.node("Mul", {"f1", "g3"}, {"g4"});
  b.node("Mul", {"g4", "half"}, {"g5"});
  b.node("MatMul", {"g5", "w2"}, {"f2"});
  b.node("Add", {"f2", "h1"}, {"r2"});
  written_layer_norm(b, "r2", "f", "y");
  return b;
}

TEST(ExporterOnnx, BertLayerGetsAttentionLayerNormAndGelu) {
  const Graph g = testing::import_built(bert_layer_model());
  ASSERT_EQ(count_op(g, "softmax"), 1u);
  const Graph o = optimize_cpu(g);
  EXPECT_EQ(count_op(o, "softmax"), 0u);
  EXPECT_EQ(count_op(o, "attention"), 1u);
  EXPECT_EQ(count_op(o, "reduce"), 0u);
  EXPECT_EQ(count_op(o, "fused_residual_ln"), 2u);  // the recognized LayerNorms take their residual adds
  EXPECT_EQ(count_op(o, "transpose"), 0u);          // BSHD attention reads the projections in place
  bool gelu = false;
  for (const Node& n : o.nodes())
    if (const auto* f = std::get_if<ops::FusedMatMulBiasAct>(&n.op)) gelu = gelu || f->activation == ActKind::Gelu;
    else if (const auto* a = std::get_if<ops::Activation>(&n.op)) gelu = gelu || a->kind == ActKind::Gelu;
  EXPECT_TRUE(gelu);
  EXPECT_TRUE(optimized_matches(g));
}

// A Llama MLP block as exported: RMSNorm spelled out (Pow, ReduceMean, Add, Sqrt, Reciprocal,
// Mul, Mul weight) and SwiGLU with silu written as x * sigmoid(x).
OnnxBuilder llama_mlp_model() {
  OnnxBuilder b(13);
  b.input("x", kF32, {1, kS, kE}).output("y");
  b.initializer("two", scalar(2)).initializer("eps", scalar(1e-6f)).initializer("rms_w", weight({kE}, 1, 1.0));
  b.initializer("wg", weight({kE, 2 * kE}, 2)).initializer("wu", weight({kE, 2 * kE}, 3));
  b.initializer("wd", weight({2 * kE, kE}, 4));
  b.node("Pow", {"x", "two"}, {"x2"});
  set_attr(b.node("ReduceMean", {"x2"}, {"ms"}), "axes", std::vector<int64_t>{-1});
  b.node("Add", {"ms", "eps"}, {"mse"});
  b.node("Sqrt", {"mse"}, {"rms"});
  b.node("Reciprocal", {"rms"}, {"inv"});
  b.node("Mul", {"x", "inv"}, {"xn"});
  b.node("Mul", {"rms_w", "xn"}, {"h"});
  b.node("MatMul", {"h", "wg"}, {"gate"});
  b.node("MatMul", {"h", "wu"}, {"up"});
  b.node("Sigmoid", {"gate"}, {"sg"});
  b.node("Mul", {"gate", "sg"}, {"silu"});
  b.node("Mul", {"silu", "up"}, {"gu"});
  b.node("MatMul", {"gu", "wd"}, {"down"});
  b.node("Add", {"down", "x"}, {"y"});
  return b;
}

TEST(ExporterOnnx, LlamaMlpGetsRmsNormAndSwiGlu) {
  const Graph g = testing::import_built(llama_mlp_model());
  const Graph o = optimize_cpu(g);
  EXPECT_EQ(count_op(o, "rms_norm"), 1u);
  EXPECT_EQ(count_op(o, "fused_swiglu"), 1u);
  EXPECT_EQ(count_op(o, "reduce") + count_op(o, "activation"), 0u);
  EXPECT_TRUE(optimized_matches(g));
}

// torch's scaled_dot_product_attention(is_causal=True) export (opset 14 symbolic): q and K^T
// each scaled by sqrt(scale), the causal mask built in the graph (ConstantOfShape, Trilu, Equal,
// Where(-inf, 0)) and folded at import, added to the scores.
TEST(ExporterOnnx, SdpaCausalExportBecomesCausalAttention) {
  OnnxBuilder b(14);
  const std::vector<int64_t> qkv{1, kH, kS, 16};
  b.input("q", kF32, qkv).input("k", kF32, qkv).input("v", kF32, qkv).output("y");
  b.initializer("ss", dims({kS, kS})).initializer("zero", scalar(0)).initializer("ninf", scalar(-INFINITY));
  b.initializer("sqrt_scale", scalar(0.5f));  // sqrt(1 / sqrt(16))
  set_attr(b.node("ConstantOfShape", {"ss"}, {"ones"}), "value", Tensor::f32({1}, std::vector<float>{1.f}));
  set_attr(b.node("Trilu", {"ones"}, {"tril"}), "upper", int64_t{0});
  b.node("Equal", {"tril", "zero"}, {"masked"});
  b.node("Where", {"masked", "ninf", "zero"}, {"mask"});
  b.node("Mul", {"q", "sqrt_scale"}, {"qs"});
  set_attr(b.node("Transpose", {"k"}, {"kt"}), "perm", std::vector<int64_t>{0, 1, 3, 2});
  b.node("Mul", {"kt", "sqrt_scale"}, {"ks"});
  b.node("MatMul", {"qs", "ks"}, {"s"});
  b.node("Add", {"s", "mask"}, {"sm"});
  set_attr(b.node("Softmax", {"sm"}, {"p"}), "axis", int64_t{-1});
  b.node("MatMul", {"p", "v"}, {"y"});
  const Graph g = testing::import_built(b);
  const Graph o = optimize_cpu(g);
  ASSERT_EQ(count_op(o, "attention"), 1u);
  EXPECT_EQ(passes::op_count(o), 1u);
  for (const Node& n : o.nodes())
    if (const auto* a = std::get_if<ops::Attention>(&n.op)) {
      EXPECT_EQ(a->mask_kind, MaskKind::Causal);
      EXPECT_NEAR(a->score_scale, 0.25, 1e-7);
      EXPECT_EQ(n.inputs.size(), 3u);
    }
  EXPECT_TRUE(optimized_matches(g));
}

// A Conv -> BatchNormalization -> Relu block (paddle2onnx keeps the BN) with small, constant
// initializers: the BN folds into the Conv.
TEST(ExporterOnnx, ConvBatchNormFolds) {
  OnnxBuilder b(13);
  b.input("x", kF32, {1, 3, 8, 8}).output("y");
  b.initializer("w", weight({4, 3, 3, 3}, 1)).initializer("cb", weight({4}, 2));
  b.initializer("s", testing::random_tensor(DType::F32, {4}, 3, 0.5, 2)).initializer("bb", weight({4}, 4));
  b.initializer("m", weight({4}, 5)).initializer("v", testing::random_tensor(DType::F32, {4}, 6, 0.2, 2));
  auto& conv = b.node("Conv", {"x", "w", "cb"}, {"c"});
  set_attr(conv, "pads", std::vector<int64_t>{1, 1, 1, 1});
  set_attr(b.node("BatchNormalization", {"c", "s", "bb", "m", "v"}, {"bn"}), "epsilon", 1e-3f);
  b.node("Relu", {"bn"}, {"y"});
  const Graph g = testing::import_built(b);
  ASSERT_EQ(count_op(g, "batch_norm_inference"), 1u);
  const Graph o = optimize_cpu(g);
  EXPECT_EQ(count_op(o, "batch_norm_inference"), 0u);
  EXPECT_EQ(count_op(o, "conv"), 1u);
  EXPECT_TRUE(optimized_matches(g));
}

}  // namespace
}  // namespace rlx
