// ONNX converters on bad input (issue 26): every model here is built in memory and must be
// rejected with an rlx::Error naming the ONNX node and what is wrong (never a crash, a non-rlx
// exception or a silently wrong result); the positive cases check that valid models still work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "onnx/onnx_builder.h"
#include "rlx/limits.h"
#include "rlx/onnx.h"
#include "rlx/session.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;

Graph import(const OnnxBuilder& b, const OnnxImportOptions& o = {}) { return testing::import_built(b, o); }

constexpr int32_t kI64 = onnx::TensorProto::INT64;
constexpr int32_t kI32 = onnx::TensorProto::INT32;

// Imports `b` and expects an rlx::Error naming the node `node` and containing every `parts`.
void expect_error(const OnnxBuilder& b, const std::string& node, const std::vector<std::string>& parts,
                  const OnnxImportOptions& o = {}) {
  try {
    import(b, o);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("ONNX node '" + node + "'"));
    for (const auto& p : parts) EXPECT_THAT(msg, HasSubstr(p));
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an rlx::Error: " << e.what();
    return;
  }
  ADD_FAILURE() << "import succeeded; expected an error with '" << (parts.empty() ? "" : parts[0]) << "'";
}

Tensor f32(std::vector<int64_t> shape, std::vector<float> v) { return Tensor::f32(std::move(shape), std::move(v)); }
Tensor i64(std::vector<int64_t> shape, std::vector<int64_t> v) { return Tensor::i64(std::move(shape), std::move(v)); }
Tensor scalar_f32(float v) { return Tensor::scalar_f32(v); }

// ---- item 6: out-of-range indices known at import time name the ONNX node and the index ----

TEST(OnnxConvertersBad, KnownOutOfRangeIndicesNameTheNode) {
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).output("y");
    b.initializer("i", i64({2, 3}, {0, 1, 2, 3, 3, 0}));
    auto& n = b.node("GatherElements", {"x", "i"}, {"y"}, "ge");
    set_attr(n, "axis", int64_t{1});
    expect_error(b, "ge", {"indices[1,0] = 3", "size 3"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).output("y");
    b.initializer("i", i64({2, 2}, {0, 1, 1, -4}));
    b.node("GatherND", {"x", "i"}, {"y"}, "gnd");
    expect_error(b, "gnd", {"indices[1,1] = -4", "size 3"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("u", kF32, {2, 3}).output("y");
    b.initializer("i", i64({2, 1}, {1, 4}));
    b.node("ScatterND", {"x", "i", "u"}, {"y"}, "snd");
    expect_error(b, "snd", {"indices[1,0] = 4", "size 4"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("u", kF32, {1, 2}).output("y");
    b.initializer("i", i64({1, 2}, {0, 9}));
    b.node("ScatterElements", {"x", "i", "u"}, {"y"}, "se");
    expect_error(b, "se", {"indices[0,1] = 9"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).output("y");
    b.initializer("i", i64({3}, {0, -5, 1}));
    b.node("Gather", {"x", "i"}, {"y"}, "gather");
    expect_error(b, "gather", {"indices[1] = -5", "size 4"});
  }
  // In range (negative ones too): imports and runs.
  OnnxBuilder ok;
  ok.input("x", kF32, {2, 3}).output("y");
  ok.initializer("i", i64({2, 1}, {-1, 0}));
  ok.node("GatherND", {"x", "i"}, {"y"}, "gnd");
  const Tensor y = testing::run_cpu1(import(ok), {{"x", f32({2, 3}, {1, 2, 3, 4, 5, 6})}});
  EXPECT_TRUE(testing::all_close(y, {2, 3}, {4, 5, 6, 1, 2, 3}));
}

TEST(OnnxConvertersBad, ConvTransposeOutputShapeAndSpaceToDepthMode) {
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 2, 5, 5}).output("y");
    b.initializer("w", testing::random_tensor(DType::F32, {2, 3, 3, 3}, 1));
    auto& n = b.node("ConvTranspose", {"x", "w"}, {"y"}, "convt");
    set_attr(n, "output_shape", std::vector<int64_t>{10});
    expect_error(b, "convt", {"output_shape has 1 entries"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 1, 4, 4}).output("y");
    auto& n = b.node("SpaceToDepth", {"x"}, {"y"}, "s2d");
    set_attr(n, "blocksize", int64_t{2});
    set_attr(n, "mode", std::string("CRD"));
    expect_error(b, "s2d", {"attribute 'mode'"});
  }
}

// ---- siblings: control flow bodies, losses, pads ---------------------------------------------

// Both If branches are checked even when the condition is known at import and only one is
// inlined: a model is refused on every input value, as `rlx check` refuses it.
TEST(OnnxConvertersBad, IfBranchesAreCheckedWhicheverIsTaken) {
  auto branch = [](const std::string& reads, int outputs) {
    OnnxBuilder body;
    for (int i = 0; i < outputs; ++i) body.output("o" + std::to_string(i));
    for (int i = 0; i < outputs; ++i) body.node("Identity", {reads}, {"o" + std::to_string(i)});
    return body.graph();
  };
  auto model = [&](const onnx::GraphProto& then_b, const onnx::GraphProto& else_b, const Tensor& cond) {
    OnnxBuilder b;
    b.input("x", kF32, {2}).output("y");
    b.initializer("c", cond);
    auto& n = b.node("If", {"c"}, {"y"}, "switch");
    set_attr(n, "then_branch", then_b);
    set_attr(n, "else_branch", else_b);
    return b;
  };
  const Tensor yes = Tensor::from_bytes(DType::Bool, {}, std::vector<uint8_t>{1}.data(), 1);
  EXPECT_NO_THROW(import(model(branch("x", 1), branch("x", 1), yes)));
  expect_error(model(branch("x", 1), branch("nope", 1), yes), "switch", {"a branch reads 'nope', which is not defined"});
  expect_error(model(branch("x", 1), branch("x", 2), yes), "switch", {"else_branch has 2 outputs, the If node 1"});
  expect_error(model(branch("x", 1), branch("x", 1), Tensor::scalar_f32(1.0f)), "switch",
               {"the condition must be a bool tensor", "f32"});
}

TEST(OnnxConvertersBad, ScanDirectionsAreZeroOrOne) {
  OnnxBuilder body;
  body.input("acc", kF32, {2}).input("xi", kF32, {2}).output("acc_out").output("yi");
  body.node("Add", {"acc", "xi"}, {"acc_out"});
  body.node("Identity", {"xi"}, {"yi"});
  for (int64_t dir : {int64_t{0}, int64_t{1}, int64_t{5}}) {
    OnnxBuilder b;
    b.input("s", kF32, {2}).input("x", kF32, {3, 2}).output("s_out").output("ys");
    auto& n = b.node("Scan", {"s", "x"}, {"s_out", "ys"}, "scan");
    set_attr(n, "num_scan_inputs", int64_t{1});
    set_attr(n, "body", body.graph());
    set_attr(n, "scan_input_directions", std::vector<int64_t>{dir});
    if (dir == 5) expect_error(b, "scan", {"scan_input_directions holds 5", "0 (forward) or 1 (reverse)"});
    else EXPECT_NO_THROW(import(b));
  }
}

TEST(OnnxConvertersBad, LoopAndScanBodiesOfTheWrongArity) {
  {
    // A Loop body with no outputs (not even the condition).
    onnx::GraphProto body;
    body.set_name("body");
    for (const char* nm : {"it", "cond", "v"}) body.add_input()->set_name(nm);
    OnnxBuilder b;
    b.input("x", kF32, {2}).output("y");
    b.initializer("trips", Tensor::scalar_i64(3));
    auto& n = b.node("Loop", {"trips", "", "x"}, {"y"}, "loop");
    set_attr(n, "body", body);
    expect_error(b, "loop", {"the body has 0 outputs"});
  }
  {
    onnx::GraphProto body;
    body.set_name("body");
    OnnxBuilder b;
    b.input("x", kF32, {3, 2}).input("s", kF32, {2}).output("y");
    auto& n = b.node("Scan", {"s", "x"}, {"y"}, "scan");
    set_attr(n, "num_scan_inputs", int64_t{1});
    set_attr(n, "body", body);
    b.model().mutable_opset_import(0)->set_version(16);
    expect_error(b, "scan", {"the body has 0 outputs"});
  }
  {
    // A trip count over the unroll cap, with a scan output (without one the loop would run as a
    // While at run time).
    onnx::GraphProto body;
    body.set_name("body");
    for (const char* nm : {"it", "cond"}) body.add_input()->set_name(nm);
    body.add_output()->set_name("cond");
    body.add_output()->set_name("it_out");
    auto* id = body.add_node();
    id->set_op_type("Identity");
    id->add_input("it");
    id->add_output("it_out");
    OnnxBuilder b;
    b.input("x", kF32, {2}).output("x");
    b.initializer("trips", Tensor::scalar_i64(100));
    auto& n = b.node("Loop", {"trips", ""}, {"its"}, "loop");
    set_attr(n, "body", body);
    OnnxImportOptions o;
    o.limits.max_unroll_steps = 10;
    expect_error(b, "loop", {"more than 10 iterations", "max_unroll_steps"}, o);
  }
}

TEST(OnnxConvertersBad, LossTargetsAndPads) {
  {
    OnnxBuilder b;
    b.input("x", kF32, {2, 3}).input("t", kF32, {2}).output("y");
    b.node("NegativeLogLikelihoodLoss", {"x", "t"}, {"y"}, "nll");
    expect_error(b, "nll", {"target (input 1) must be int32 or int64"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {2, 3}).input("t", kI64, {3}).output("y");
    b.node("NegativeLogLikelihoodLoss", {"x", "t"}, {"y"}, "nll");
    expect_error(b, "nll", {"must have shape (N, d...) = [2]"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {2, 3}).output("y");
    b.initializer("p", i64({4}, {0, std::numeric_limits<int64_t>::max(), 0, 1}));
    b.node("Pad", {"x", "p"}, {"y"}, "pad");
    expect_error(b, "pad", {"exceed the tensor size limit"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {2, 3}).output("y");
    b.initializer("p", i64({4}, {0, -2, 0, -2}));
    b.node("Pad", {"x", "p"}, {"y"}, "pad");
    expect_error(b, "pad", {"crop more than the 3 elements of axis 1"});
  }
}

// An LSTM over `steps` time steps (batch 1, input 4, hidden 8).
OnnxBuilder lstm_model(int64_t steps) {
  OnnxBuilder b;
  b.input("x", kF32, {steps, 1, 4}).output("y");
  b.initializer("w", testing::random_tensor(DType::F32, {1, 32, 4}, 1));
  b.initializer("r", testing::random_tensor(DType::F32, {1, 32, 8}, 2));
  auto& n = b.node("LSTM", {"x", "w", "r"}, {"y"}, "lstm0");
  set_attr(n, "hidden_size", int64_t{8});
  return b;
}

// ---- item 2: wrong-rank operands, per converter family ----------------------------------

// Attention with Q 4-d (B=1, H=2, S=3, D=4) and K/V of the given shapes.
OnnxBuilder attention_model(const std::vector<int64_t>& q, const std::vector<int64_t>& k, const std::vector<int64_t>& v) {
  OnnxBuilder b(23, 10);
  b.input("q", kF32, q).input("k", kF32, k).input("v", kF32, v).output("y");
  b.node("Attention", {"q", "k", "v"}, {"y"}, "attn");
  return b;
}

TEST(OnnxConvertersBad, AttentionOperandRanks) {
  expect_error(attention_model({1, 2, 3, 4}, {}, {1, 2, 3, 4}), "attn", {"K (input 1) must have Q's rank 4", "f32[]"});
  expect_error(attention_model({1, 2, 3, 4}, {3, 4}, {1, 2, 3, 4}), "attn", {"K (input 1) must have Q's rank"});
  expect_error(attention_model({1, 2, 3, 4}, {1, 2, 3, 4}, {3, 4}), "attn", {"V (input 2) must have Q's rank"});
  expect_error(attention_model({3, 4}, {3, 4}, {3, 4}), "attn", {"Q must be 3-d"});
  expect_error(attention_model({}, {}, {}), "attn", {"Q must be 3-d"});
  // Batches that differ would broadcast silently in the matmul: rejected.
  expect_error(attention_model({2, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}), "attn", {"inconsistent shapes"});
  expect_error(attention_model({1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2, 3, 4}), "attn", {"inconsistent shapes"});
  {
    OnnxBuilder b = attention_model({1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4});
    b.input("m", kF32, {});
    b.graph().mutable_node(0)->add_input("m");
    expect_error(b, "attn", {"attn_mask (input 3) must have rank 2 to 4"});
  }
  {
    OnnxBuilder b = attention_model({1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4});
    b.input("pk", kF32, {2, 4}).input("pv", kF32, {1, 2, 2, 4});
    auto* n = b.graph().mutable_node(0);
    n->add_input("");
    n->add_input("pk");
    n->add_input("pv");
    expect_error(b, "attn", {"past_key (input 4) must be 4-d"});
  }
  {
    OnnxBuilder b = attention_model({1, 3, 8}, {1, 3, 8}, {1, 3, 8});
    set_attr(*b.graph().mutable_node(0), "q_num_heads", int64_t{2});
    set_attr(*b.graph().mutable_node(0), "kv_num_heads", int64_t{2});
    set_attr(*b.graph().mutable_node(0), "qk_matmul_output_mode", int64_t{7});
    expect_error(b, "attn", {"qk_matmul_output_mode 7"});
  }
}

TEST(OnnxConvertersBad, AttentionValidStillRuns) {
  const Graph g = import(attention_model({1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 6}));
  const Tensor q = testing::random_tensor(DType::F32, {1, 2, 3, 4}, 1);
  const Tensor k = testing::random_tensor(DType::F32, {1, 2, 5, 4}, 2);
  const Tensor v = testing::random_tensor(DType::F32, {1, 2, 5, 6}, 3);
  const Tensor y = testing::run_cpu1(g, {{"q", q}, {"k", k}, {"v", v}});
  const auto qv = q.to_f64(), kv = k.to_f64(), vv = v.to_f64();
  std::vector<double> want;
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 3; ++i) {
      std::vector<double> s(5);
      double mx = -1e300, sum = 0;
      for (int j = 0; j < 5; ++j) {
        double d = 0;
        for (int e = 0; e < 4; ++e) d += qv[(h * 3 + i) * 4 + e] * kv[(h * 5 + j) * 4 + e];
        s[j] = d / 2.0;
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int e = 0; e < 6; ++e) {
        double o = 0;
        for (int j = 0; j < 5; ++j) o += s[j] / sum * vv[(h * 5 + j) * 6 + e];
        want.push_back(o);
      }
    }
  EXPECT_TRUE(testing::all_close(y, {1, 2, 3, 6}, want));
}

TEST(OnnxConvertersBad, NnOperandRanksAndAttributes) {
  {
    OnnxBuilder b;
    b.input("a", kF32, {2, 3, 4}).input("b", kF32, {4, 5}).output("y");
    b.node("Gemm", {"a", "b"}, {"y"}, "gemm");
    expect_error(b, "gemm", {"input 0 (A) must have rank 2"});
  }
  auto conv = [](const std::vector<int64_t>& x, const std::vector<int64_t>& w) {
    OnnxBuilder b;
    b.input("x", kF32, x).output("y");
    b.initializer("w", testing::random_tensor(DType::F32, w, 1));
    b.node("Conv", {"x", "w"}, {"y"}, "conv");
    return b;
  };
  expect_error(conv({1, 2, 5, 5}, {3, 2, 3}), "conv", {"same rank"});
  expect_error(conv({1, 2, 5}, {3, 2}), "conv", {"rank >= 3"});
  {
    OnnxBuilder b = conv({1, 2, 5, 5}, {4, 2, 3, 3});
    set_attr(*b.graph().mutable_node(0), "strides", std::vector<int64_t>{1});
    expect_error(b, "conv", {"strides (1)", "2 spatial dims"});
  }
  {
    OnnxBuilder b = conv({1, 2, 5, 5}, {4, 2, 3, 3});
    set_attr(*b.graph().mutable_node(0), "strides", std::vector<int64_t>{1, 0});
    expect_error(b, "conv", {"strides[1] is 0"});
  }
  {
    OnnxBuilder b = conv({1, 2, 5, 5}, {4, 2, 3, 3});
    set_attr(*b.graph().mutable_node(0), "pads", std::vector<int64_t>{0, -1, 0, 0});
    expect_error(b, "conv", {"pads[1] is -1"});
  }
  {
    OnnxBuilder b = conv({1, 2, 5, 5}, {4, 2, 3, 3});
    set_attr(*b.graph().mutable_node(0), "group", int64_t{0});
    expect_error(b, "conv", {"group is 0"});
  }
  {
    OnnxBuilder b = conv({1, 4, 5, 5}, {3, 2, 3, 3});
    set_attr(*b.graph().mutable_node(0), "group", int64_t{2});
    expect_error(b, "conv", {"group 2 does not divide the 3 output channels"});
  }
  expect_error(conv({1, 3, 5, 5}, {4, 2, 3, 3}), "conv", {"input channels 3 != weight channels 2"});
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 2, 5, 5}).output("y");
    auto& n = b.node("MaxPool", {"x"}, {"y"}, "pool");
    set_attr(n, "kernel_shape", std::vector<int64_t>{0, 2});
    expect_error(b, "pool", {"kernel_shape[0] is 0"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 2, 5, 5}).output("y");
    auto& n = b.node("AveragePool", {"x"}, {"y"}, "pool");
    set_attr(n, "kernel_shape", std::vector<int64_t>{2});
    expect_error(b, "pool", {"must have rank 3 for a 1-d kernel"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 2, 5, 5}).output("y");
    b.initializer("w", testing::random_tensor(DType::F32, {2, 3, 3, 3}, 1));
    auto& n = b.node("ConvTranspose", {"x", "w"}, {"y"}, "convt");
    set_attr(n, "dilations", std::vector<int64_t>{1, 0});
    expect_error(b, "convt", {"dilations[1] is 0"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4}).output("y");
    for (const char* nm : {"s", "bb", "m", "v"}) b.initializer(nm, f32({4}, {1, 1, 1, 1}));
    b.node("BatchNormalization", {"x", "s", "bb", "m", "v"}, {"y"}, "bn");
    expect_error(b, "bn", {"X must have rank >= 2"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {2, 4, 3}).output("y");
    b.initializer("s", f32({3}, {1, 1, 1}));
    for (const char* nm : {"bb", "m", "v"}) b.initializer(nm, f32({4}, {1, 1, 1, 1}));
    b.node("BatchNormalization", {"x", "s", "bb", "m", "v"}, {"y"}, "bn");
    expect_error(b, "bn", {"input 1 must be 1-d with one entry per channel (4)"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {2, 4}).output("y");
    auto& n = b.node("LpNormalization", {"x"}, {"y"}, "lpn");
    set_attr(n, "axis", int64_t{5});
    expect_error(b, "lpn", {"axis"});
  }
}

TEST(OnnxConvertersBad, RnnOperandShapes) {
  auto lstm = [](const std::vector<int64_t>& w, const std::vector<int64_t>& r) {
    OnnxBuilder b;
    b.input("x", kF32, {5, 2, 3}).output("y");
    b.initializer("w", testing::random_tensor(DType::F32, w, 1));
    b.initializer("r", testing::random_tensor(DType::F32, r, 2));
    b.node("LSTM", {"x", "w", "r"}, {"y"}, "lstm");
    return b;
  };
  expect_error(lstm({16, 3}, {1, 16, 4}), "lstm", {"W must be a static 3-d tensor"});
  expect_error(lstm({1, 15, 3}, {1, 15, 3}), "lstm", {"dim 1 must be 4 x hidden_size"});
  expect_error(lstm({1, 16, 2}, {1, 16, 4}), "lstm", {"W (input 1) must have shape [1,16,3]"});
  expect_error(lstm({1, 16, 3}, {1, 16}), "lstm", {"R (input 2) must have shape [1,16,4]"});
  expect_error(lstm({2, 16, 3}, {2, 16, 4}), "lstm", {"W (input 1) must have shape [1,16,3]"});
  {
    OnnxBuilder b = lstm({1, 16, 3}, {1, 16, 4});
    b.initializer("bias", testing::random_tensor(DType::F32, {1, 16}, 3));
    b.graph().mutable_node(0)->add_input("bias");
    expect_error(b, "lstm", {"B (input 3) must have shape [1,32]"});
  }
  {
    OnnxBuilder b = lstm({1, 16, 3}, {1, 16, 4});
    b.initializer("h0", testing::random_tensor(DType::F32, {1, 4}, 3));
    auto* n = b.graph().mutable_node(0);
    n->add_input("");
    n->add_input("");
    n->add_input("h0");
    expect_error(b, "lstm", {"initial_h (input 5) must have shape [1,2,4]"});
  }
  {
    OnnxBuilder b = lstm({1, 16, 3}, {1, 16, 4});
    set_attr(*b.graph().mutable_node(0), "clip", std::numeric_limits<float>::quiet_NaN());
    expect_error(b, "lstm", {"clip must be a finite value"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 3, 8}).output("y");
    b.initializer("cos", testing::random_tensor(DType::F32, {4}, 1));
    b.initializer("sin", testing::random_tensor(DType::F32, {4}, 2));
    auto& n = b.node("RotaryEmbedding", {"x", "cos", "sin"}, {"y"}, "rope");
    set_attr(n, "num_heads", int64_t{2});
    b.model().mutable_opset_import(0)->set_version(23);
    expect_error(b, "rope", {"cos_cache (input 1) must be 3-d"});
  }
}

// ---- item 7: the unroll cap (test_onnx_rnn.cpp: it applies where a backend unrolls the layer) --

// GRU with layout=1 (batch first) and an initial state equals the layout=0 model on
// transposed operands (initial_h is [batch, dirs, hidden] there).
TEST(OnnxConvertersBad, GruBatchFirstInitialState) {
  const int64_t S = 4, B = 2, I = 3, H = 5;
  const Tensor w = testing::random_tensor(DType::F32, {1, 3 * H, I}, 1);
  const Tensor r = testing::random_tensor(DType::F32, {1, 3 * H, H}, 2);
  const Tensor x = testing::random_tensor(DType::F32, {S, B, I}, 3);
  const Tensor h0 = testing::random_tensor(DType::F32, {1, B, H}, 4);
  auto model = [&](bool bf) {
    OnnxBuilder b;
    b.input("x", kF32, bf ? std::vector<int64_t>{B, S, I} : std::vector<int64_t>{S, B, I});
    b.input("h0", kF32, bf ? std::vector<int64_t>{B, 1, H} : std::vector<int64_t>{1, B, H});
    b.output("y").output("yh");
    b.initializer("w", w).initializer("r", r);
    auto& n = b.node("GRU", {"x", "w", "r", "", "", "h0"}, {"y", "yh"}, "gru");
    set_attr(n, "hidden_size", H);
    if (bf) set_attr(n, "layout", int64_t{1});
    return import(b);
  };
  auto transpose3 = [](const Tensor& t, int64_t a, int64_t b2) {  // swap dims 0 and 1
    (void)a, (void)b2;
    const auto d = t.shape();
    const auto v = t.to_f64();
    std::vector<float> out(v.size());
    for (int64_t i = 0; i < d[0]; ++i)
      for (int64_t j = 0; j < d[1]; ++j)
        for (int64_t k = 0; k < d[2]; ++k) out[(j * d[0] + i) * d[2] + k] = static_cast<float>(v[(i * d[1] + j) * d[2] + k]);
    return Tensor::f32({d[1], d[0], d[2]}, out);
  };
  const auto seq = testing::run_cpu(model(false), {{"x", x}, {"h0", h0}});
  const auto bf = testing::run_cpu(model(true), {{"x", transpose3(x, 0, 1)}, {"h0", transpose3(h0, 0, 1)}});
  const Tensor want_h = transpose3(seq[1], 0, 1);
  EXPECT_TRUE(testing::all_close(bf[1], want_h.shape(), want_h.to_f64()));
}

// ---- item 4: sizes from data, float->int conversions ---------------------------------------

OnnxBuilder range_model(const Tensor& s, const Tensor& l, const Tensor& d) {
  OnnxBuilder b;
  b.output("y");
  b.initializer("s", s).initializer("l", l).initializer("d", d);
  b.node("Range", {"s", "l", "d"}, {"y"}, "range");
  return b;
}

TEST(OnnxConvertersBad, RangeFromBadData) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  expect_error(range_model(scalar_f32(0), scalar_f32(inf), scalar_f32(1)), "range", {"must be finite"});
  expect_error(range_model(scalar_f32(0), scalar_f32(nan), scalar_f32(1)), "range", {"must be finite"});
  expect_error(range_model(scalar_f32(0), scalar_f32(10), scalar_f32(-inf)), "range", {"must be finite"});
  expect_error(range_model(scalar_f32(0), scalar_f32(10), scalar_f32(0)), "range", {"delta is 0"});
  expect_error(range_model(scalar_f32(0), scalar_f32(1e12f), scalar_f32(1)), "range", {"more than the"});
  expect_error(range_model(scalar_f32(0), scalar_f32(1), scalar_f32(1e-30f)), "range", {"more than the"});
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  expect_error(range_model(Tensor::scalar_i64(lo), Tensor::scalar_i64(hi), Tensor::scalar_i64(1)), "range",
               {"more than 2^63"});
  expect_error(range_model(Tensor::scalar_i64(0), Tensor::scalar_i64(1), Tensor::scalar_i64(0)), "range", {"delta is 0"});
  expect_error(range_model(Tensor::scalar_i64(0), scalar_f32(4), Tensor::scalar_i64(1)), "range", {"one type"});
  // Valid ranges, including a huge step that must not overflow.
  const Tensor y = testing::run_cpu1(import(range_model(Tensor::scalar_i64(hi - 3), Tensor::scalar_i64(hi),
                                                        Tensor::scalar_i64(hi))), {});
  EXPECT_EQ(y.to_i64(), std::vector<int64_t>{hi - 3});
  const Tensor z = testing::run_cpu1(import(range_model(scalar_f32(1), scalar_f32(-2), scalar_f32(-1))), {});
  EXPECT_TRUE(testing::all_close(z, {3}, {1, 0, -1}));
}

OnnxBuilder one_hot_model(const Tensor& depth, const std::vector<int64_t>& values_shape = {2}) {
  OnnxBuilder b;
  b.input("i", kI64, {3}).output("y");
  b.initializer("depth", depth);
  std::vector<float> vals(static_cast<size_t>(values_shape.empty() ? 1 : values_shape[0]), 1.0f);
  b.initializer("vals", Tensor::f32(values_shape, vals));
  b.node("OneHot", {"i", "depth", "vals"}, {"y"}, "onehot");
  return b;
}

TEST(OnnxConvertersBad, OneHotDepthFromBadData) {
  expect_error(one_hot_model(scalar_f32(1e12f)), "onehot", {"depth", "must be a finite value in [1,"});
  expect_error(one_hot_model(Tensor::scalar_i64(int64_t{1} << 40)), "onehot", {"depth"});
  expect_error(one_hot_model(scalar_f32(std::numeric_limits<float>::quiet_NaN())), "onehot", {"depth"});
  expect_error(one_hot_model(scalar_f32(std::numeric_limits<float>::infinity())), "onehot", {"depth"});
  expect_error(one_hot_model(Tensor::scalar_i64(0)), "onehot", {"depth"});
  expect_error(one_hot_model(Tensor::scalar_i64(-3)), "onehot", {"depth"});
  expect_error(one_hot_model(Tensor::scalar_i64(4), {3}), "onehot", {"values must be [off, on]"});
  expect_error(one_hot_model(Tensor::scalar_i64(4), {}), "onehot", {"values must be [off, on]"});
  OnnxBuilder ok;
  ok.input("i", kI64, {3}).output("y");
  ok.initializer("depth", scalar_f32(4.0f)).initializer("vals", f32({2}, {-1, 5}));
  ok.node("OneHot", {"i", "depth", "vals"}, {"y"}, "onehot");
  const Tensor y = testing::run_cpu1(import(ok), {{"i", i64({3}, {0, -1, 2})}});
  EXPECT_TRUE(testing::all_close(y, {3, 4}, {5, -1, -1, -1, -1, -1, -1, 5, -1, -1, 5, -1}));
}

TEST(OnnxConvertersBad, ShapeOpSizesFromBadData) {
  {
    OnnxBuilder b;
    b.input("x", kF32, {2, 3}).output("y");
    b.initializer("reps", i64({2}, {int64_t{1} << 62, 4}));
    b.node("Tile", {"x", "reps"}, {"y"}, "tile");
    expect_error(b, "tile", {"tile"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {2, 3}).output("y");
    b.initializer("shape", i64({2}, {-2, 3}));
    b.node("Expand", {"x", "shape"}, {"y"}, "expand");
    expect_error(b, "expand", {"negative entry"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {100000, 100000}).output("y");
    b.node("EyeLike", {"x"}, {"y"}, "eye");
    expect_error(b, "eye", {"larger than the"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {100000, 100000}).output("y");
    b.node("Trilu", {"x"}, {"y"}, "trilu");
    expect_error(b, "trilu", {"mask"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 4, 2, 2}).output("y");
    auto& n = b.node("DepthToSpace", {"x"}, {"y"}, "d2s");
    set_attr(n, "blocksize", int64_t{1} << 40);
    expect_error(b, "d2s", {"blocksize"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 2, 3, 4}).output("y");
    b.initializer("scales", f32({4}, {1, 1, std::numeric_limits<float>::infinity(), 1}));
    b.node("Resize", {"x", "", "scales"}, {"y"}, "resize");
    expect_error(b, "resize", {"scales[2]", "finite"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 2, 3, 4}).output("y");
    b.initializer("scales", f32({4}, {1, 1, 1e30f, 1e30f}));
    b.node("Resize", {"x", "", "scales"}, {"y"}, "resize");
    expect_error(b, "resize", {"scales[2]"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {1, 2, 3, 4}).output("y");
    b.initializer("sizes", i64({4}, {1, 2, -3, 4}));
    b.node("Resize", {"x", "", "", "sizes"}, {"y"}, "resize");
    expect_error(b, "resize", {"sizes[2] is -3"});
  }
  // Slice with a step of INT64_MAX (must not overflow) and a negative step on an empty dim.
  {
    OnnxBuilder b;
    b.input("x", kF32, {5}).output("y");
    b.initializer("st", i64({1}, {1})).initializer("en", i64({1}, {5})).initializer("ax", i64({1}, {0}));
    b.initializer("sp", i64({1}, {std::numeric_limits<int64_t>::max()}));
    b.node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"}, "slice");
    const Tensor y = testing::run_cpu1(import(b), {{"x", f32({5}, {0, 1, 2, 3, 4})}});
    EXPECT_TRUE(testing::all_close(y, {1}, {1}));
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {0, 2}).output("y");
    b.initializer("st", i64({1}, {-1})).initializer("en", i64({1}, {-10})).initializer("ax", i64({1}, {0}));
    b.initializer("sp", i64({1}, {-1}));
    b.node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"}, "slice");
    const Graph g = import(b);
    EXPECT_EQ(g.shape(g.outputs()[0]).concrete(), (std::vector<int64_t>{0, 2}));
  }
}

// ---- item 10: float index operands are errors, never truncated -----------------------------

TEST(OnnxConvertersBad, FloatIndicesRejected) {
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kF32, {2}).output("y");
    b.node("Gather", {"x", "i"}, {"y"}, "gather");
    expect_error(b, "gather", {"input 1 (indices) must be int32 or int64", "f32[2]"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).output("y");
    b.initializer("i", f32({2}, {1.7f, 2.2f}));
    b.node("Gather", {"x", "i"}, {"y"}, "gather");
    expect_error(b, "gather", {"must be int32 or int64"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kF32, {4, 3}).output("y");
    b.node("GatherElements", {"x", "i"}, {"y"}, "ge");
    expect_error(b, "ge", {"must be int32 or int64"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kF32, {2, 2}).output("y");
    b.node("GatherND", {"x", "i"}, {"y"}, "gnd");
    expect_error(b, "gnd", {"must be int32 or int64"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kF32, {2, 1}).input("u", kF32, {2, 3}).output("y");
    b.node("ScatterND", {"x", "i", "u"}, {"y"}, "snd");
    expect_error(b, "snd", {"must be int32 or int64"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kF32, {2, 3}).input("u", kF32, {2, 3}).output("y");
    b.node("ScatterElements", {"x", "i", "u"}, {"y"}, "se");
    expect_error(b, "se", {"must be int32 or int64"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).output("v").output("i");
    b.initializer("k", f32({1}, {2.0f}));
    b.node("TopK", {"x", "k"}, {"v", "i"}, "topk");
    expect_error(b, "topk", {"k must be an integer tensor"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4}).output("y");
    b.initializer("c", f32({2}, {1, 0}));
    auto& n = b.node("Compress", {"x", "c"}, {"y"}, "compress");
    set_attr(n, "axis", int64_t{0});
    expect_error(b, "compress", {"condition must be a 1-d bool tensor"});
  }
  // int32 indices stay valid.
  OnnxBuilder ok;
  ok.input("x", kF32, {4}).input("i", kI32, {2}).output("y");
  ok.node("Gather", {"x", "i"}, {"y"}, "gather");
  const Tensor y = testing::run_cpu1(import(ok), {{"x", f32({4}, {10, 11, 12, 13})}, {"i", Tensor::i32({2}, std::vector<int32_t>{3, -4})}});
  EXPECT_TRUE(testing::all_close(y, {2}, {13, 10}));
}

TEST(OnnxConvertersBad, IndexingShapes) {
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kI64, {2, 0}).output("y");
    b.node("GatherND", {"x", "i"}, {"y"}, "gnd");
    expect_error(b, "gnd", {"index tuple length) is 0"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kI64, {2, 3}).output("y");
    b.node("GatherND", {"x", "i"}, {"y"}, "gnd");
    expect_error(b, "gnd", {"index tuple length) is 3"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kI64, {2, 1}).output("y");
    auto& n = b.node("GatherND", {"x", "i"}, {"y"}, "gnd");
    set_attr(n, "batch_dims", int64_t{-1});
    expect_error(b, "gnd", {"batch_dims -1"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kI64, {2, 1}).input("u", kF32, {2, 4}).output("y");
    b.node("ScatterND", {"x", "i", "u"}, {"y"}, "snd");
    expect_error(b, "snd", {"updates f32[2,4]", "[2,3]"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kI64, {2, 5}).output("y");
    b.node("GatherElements", {"x", "i"}, {"y"}, "ge");
    expect_error(b, "ge", {"larger than data"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {4, 3}).input("i", kI64, {2, 3}).input("u", kF32, {3, 3}).output("y");
    b.node("ScatterElements", {"x", "i", "u"}, {"y"}, "se");
    expect_error(b, "se", {"must have the indices' shape"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {3}).output("y");
    b.initializer("c", Tensor::boolean({5}, std::vector<uint8_t>{1, 0, 1, 1, 1}));
    auto& n = b.node("Compress", {"x", "c"}, {"y"}, "compress");
    set_attr(n, "axis", int64_t{0});
    expect_error(b, "compress", {"condition has 5 entries"});
  }
}

// Import, compile and run time of a long LSTM, one IR recurrent node whatever its length (set
// RLX_RNN_TIMING=1 to print them for 1k/2k/4k steps).
TEST(OnnxConvertersBad, RnnUnrollTiming) {
  if (!std::getenv("RLX_RNN_TIMING")) GTEST_SKIP() << "set RLX_RNN_TIMING=1";
  for (int64_t steps : {1000, 2000, 4000}) {
    const OnnxBuilder b = lstm_model(steps);
    OnnxImportOptions o;
    o.limits.max_unroll_steps = 100000;
    const auto t0 = std::chrono::steady_clock::now();
    const Graph g = import(b, o);
    const auto t1 = std::chrono::steady_clock::now();
    CompileOptions co;
    co.num_threads = 1;
    co.limits.max_unroll_steps = 100000;
    CompiledGraph cg = Session(Device::Cpu).compile(g, co);
    const auto t2 = std::chrono::steady_clock::now();
    cg.run({{"x", testing::random_tensor(DType::F32, {steps, 1, 4}, 3)}});
    const auto t3 = std::chrono::steady_clock::now();
    auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::printf("LSTM %lld steps: import %.2f s, compile %.2f s, run %.2f s (%zu nodes)\n",
                static_cast<long long>(steps), sec(t0, t1), sec(t1, t2), sec(t2, t3), g.size());
  }
}

}  // namespace
}  // namespace rlx

#include "io/onnx/importer.h"

namespace rlx {
namespace {

// Every converter, fed operands of the wrong rank (0-d, 1-d, 2-d, 5-d), float or integer,
// known at import time or not: an rlx::Error or a model, never a crash or another exception.
TEST(OnnxConvertersBad, EveryConverterSurvivesOperandsOfAnyRank) {
  int errors = 0, imported = 0;
  for (const auto& [op, conv] : onnx_io::converters()) {
    (void)conv;
    if (op == "If" || op == "Loop" || op == "Scan" || op == "Constant") continue;  // need attributes (covered above)
    for (const std::vector<int64_t>& dims :
         {std::vector<int64_t>{}, std::vector<int64_t>{2}, std::vector<int64_t>{2, 3}, std::vector<int64_t>{1, 2, 1, 2, 3}})
      for (int32_t elem : {kF32, kI64})
        for (bool known : {false, true})
          for (int nin : {1, 2, 3, 5, 8}) {
            OnnxBuilder b(23, 10);
            std::vector<std::string> ins;
            for (int i = 0; i < nin; ++i) {
              const std::string nm = "in" + std::to_string(i);
              if (known) {
                const DType dt = elem == kF32 ? DType::F32 : DType::I64;
                b.initializer(nm, testing::random_tensor(dt, dims, static_cast<uint64_t>(i + 1), 0.0, 3.0));
              } else {
                b.input(nm, elem, dims);
              }
              ins.push_back(nm);
            }
            b.output("y");
            b.node(op, ins, {"y"}, "n");
            try {
              import(b);
              ++imported;
            } catch (const Error&) {
              ++errors;
            } catch (const std::exception& e) {
              ADD_FAILURE() << op << " with " << nin << " inputs of shape " << dims_str(dims) << (known ? " (known)" : "")
                            << ": not an rlx::Error: " << e.what();
            }
          }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(imported, 0);
}

}  // namespace
}  // namespace rlx

namespace rlx {
namespace {

// Every converter with one integer (list) attribute set to an out-of-range value, on operands
// of several ranks: an rlx::Error or a model, never a crash or another exception.
TEST(OnnxConvertersBad, EveryConverterSurvivesBadIntegerAttributes) {
  const char* names[] = {"axis", "axes", "perm", "kernel_shape", "strides", "pads", "dilations", "group", "blocksize",
                         "k", "num_outputs", "batch_dims", "hidden_size", "num_heads", "q_num_heads", "kv_num_heads",
                         "size", "p", "start", "end", "to", "output_datatype", "dtype", "block_size", "num_groups",
                         "rotary_embedding_dim", "output_padding", "output_shape", "split", "num_scan_inputs",
                         "softmax_precision", "qk_matmul_output_mode", "select_last_index", "ignore_index"};
  int errors = 0;
  for (const auto& [op, conv] : onnx_io::converters()) {
    (void)conv;
    if (op == "If" || op == "Loop" || op == "Scan" || op == "Constant") continue;
    for (const char* name : names)
      for (int64_t v : {int64_t{-9}, int64_t{1} << 40})
        for (const std::vector<int64_t>& dims : {std::vector<int64_t>{}, std::vector<int64_t>{1, 2, 3, 4}})
          for (int nin : {1, 3}) {
            OnnxBuilder b(23, 10);
            std::vector<std::string> ins;
            for (int i = 0; i < nin; ++i) {
              b.input("in" + std::to_string(i), kF32, dims);
              ins.push_back("in" + std::to_string(i));
            }
            b.output("y");
            auto& n = b.node(op, ins, {"y"}, "n");
            const std::string nm = name;
            const bool list = nm == "axes" || nm == "perm" || nm == "kernel_shape" || nm == "strides" || nm == "pads" ||
                              nm == "dilations" || nm == "output_padding" || nm == "output_shape" || nm == "split";
            if (list) set_attr(n, nm, std::vector<int64_t>(dims.size() < 2 ? 1 : dims.size() - 2, v));
            else set_attr(n, nm, v);
            try {
              import(b);
            } catch (const Error&) {
              ++errors;
            } catch (const std::exception& e) {
              ADD_FAILURE() << op << " " << nm << "=" << v << " on " << nin << " x " << dims_str(dims)
                            << ": not an rlx::Error: " << e.what();
            }
          }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace rlx

namespace rlx {
namespace {

// Every converter whose operands 1.. are known at import time and hold extreme values (int64
// limits, 2^40, NaN, inf, 1e30): sizes and axes computed from data are checked, never a crash.
TEST(OnnxConvertersBad, EveryConverterSurvivesExtremeKnownOperands) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<Tensor> operands;
  for (int64_t v : {lo, hi, int64_t{-1}, int64_t{1} << 40})
    for (int64_t len : {1, 3, 8}) operands.push_back(Tensor::i64({len}, std::vector<int64_t>(static_cast<size_t>(len), v)));
  operands.push_back(Tensor::scalar_i64(hi));
  operands.push_back(Tensor::scalar_i64(int64_t{1} << 40));
  for (float v : {nan, inf, -inf, 1e30f})
    for (int64_t len : {1, 4}) operands.push_back(Tensor::f32({len}, std::vector<float>(static_cast<size_t>(len), v)));
  operands.push_back(Tensor::scalar_f32(1e30f));
  int errors = 0;
  for (const auto& [op, conv] : onnx_io::converters()) {
    (void)conv;
    if (op == "If" || op == "Loop" || op == "Scan" || op == "Constant") continue;
    for (const Tensor& t : operands)
      for (int nin : {2, 3, 4}) {
        OnnxBuilder b(23, 10);
        b.input("x", kF32, {2, 3, 4}).output("y");
        std::vector<std::string> ins{"x"};
        for (int i = 1; i < nin; ++i) {
          b.initializer("k" + std::to_string(i), t);
          ins.push_back("k" + std::to_string(i));
        }
        b.node(op, ins, {"y"}, "n");
        try {
          import(b);
        } catch (const Error&) {
          ++errors;
        } catch (const std::exception& e) {
          ADD_FAILURE() << op << " with " << nin - 1 << " operands " << t.shape_info().str() << " = " << t.to_f64()[0]
                        << ": not an rlx::Error: " << e.what();
        }
      }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace rlx
