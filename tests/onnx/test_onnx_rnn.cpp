// ONNX RNN, GRU and LSTM import to one IR Recurrent node each (tests/ops/test_recurrent.cpp checks
// the op against a reference): the attributes and optional inputs it carries, a hand-computed
// LSTM, a symbolic sequence length, and the import errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "onnx/onnx_builder.h"
#include "passes/legalize.h"
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
constexpr int32_t kI32 = onnx::TensorProto::INT32;

Graph import(const OnnxBuilder& b, const OnnxImportOptions& o = {}) { return testing::import_built(b, o); }

void set_strings(onnx::NodeProto& n, const std::string& name, const std::vector<std::string>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const auto& s : v) a->add_strings(s);
}

// The Recurrent nodes of g.
std::vector<const ops::Recurrent*> recurrent_nodes(const Graph& g) {
  std::vector<const ops::Recurrent*> out;
  for (const Node& n : g.nodes())
    if (const auto* r = std::get_if<ops::Recurrent>(&n.op)) out.push_back(r);
  return out;
}

// Imports `b` and expects an rlx::Error naming the node `node` and containing every `parts`.
void expect_error(const OnnxBuilder& b, const std::string& node, const std::vector<std::string>& parts) {
  const std::string msg = testing::error_message([&] { (void)import(b); });
  EXPECT_THAT(msg, HasSubstr("ONNX node '" + node + "'"));
  for (const auto& p : parts) EXPECT_THAT(msg, HasSubstr(p));
}

// A bidirectional LSTM, layout 1, with every optional input: one Recurrent node carrying it all.
TEST(OnnxRnn, LstmImportsAsOneRecurrentNode) {
  const int64_t S = 5, B = 3, I = 7, H = 4;
  OnnxBuilder b;
  b.input("x", kF32, {B, S, I}).input("h0", kF32, {B, 2, H}).input("c0", kF32, {B, 2, H});
  b.output("y").output("yh").output("yc");
  b.initializer("w", testing::random_tensor(DType::F32, {2, 4 * H, I}, 1));
  b.initializer("r", testing::random_tensor(DType::F32, {2, 4 * H, H}, 2));
  b.initializer("b", testing::random_tensor(DType::F32, {2, 8 * H}, 3));
  b.initializer("lens", Tensor::i32({B}, std::vector<int32_t>(static_cast<size_t>(B), static_cast<int32_t>(S))));
  b.initializer("p", testing::random_tensor(DType::F32, {2, 3 * H}, 4));
  auto& n = b.node("LSTM", {"x", "w", "r", "b", "lens", "h0", "c0", "p"}, {"y", "yh", "yc"}, "lstm");
  set_attr(n, "hidden_size", H);
  set_attr(n, "direction", std::string("bidirectional"));
  set_attr(n, "layout", int64_t{1});
  set_attr(n, "clip", 2.5f);
  set_strings(n, "activations", {"Sigmoid", "Tanh", "Relu", "Tanh", "Sigmoid", "Tanh"});
  const Graph g = import(b);
  const auto rec = recurrent_nodes(g);
  ASSERT_EQ(rec.size(), 1u);
  const ops::Recurrent& op = *rec[0];
  EXPECT_EQ(op.cell, RnnCell::Lstm);
  EXPECT_EQ(op.direction, RnnDirection::Bidirectional);
  EXPECT_EQ(op.hidden_size, H);
  EXPECT_TRUE(op.batch_first);
  EXPECT_EQ(op.clip, 2.5);
  EXPECT_TRUE(op.has_bias && op.has_initial_h && op.has_initial_c && op.has_peepholes);
  EXPECT_EQ(op.activations, (std::vector<ActKind>{ActKind::Sigmoid, ActKind::Tanh, ActKind::Relu, ActKind::Tanh,
                                                  ActKind::Sigmoid, ActKind::Tanh}));
  EXPECT_LT(g.size(), 20u);
  EXPECT_EQ(g.shape(g.outputs()[0]).str(), "f32[3,5,2,4]");
  EXPECT_EQ(g.shape(g.outputs()[2]).str(), "f32[3,2,4]");
}

TEST(OnnxRnn, GruAndRnnCarryTheirAttributes) {
  OnnxBuilder b;
  b.input("x", kF32, {4, 2, 3}).output("y").output("yh");
  b.initializer("w", testing::random_tensor(DType::F32, {1, 15, 3}, 1));
  b.initializer("r", testing::random_tensor(DType::F32, {1, 15, 5}, 2));
  auto& n = b.node("GRU", {"x", "w", "r"}, {"y", "yh"}, "gru");
  set_attr(n, "linear_before_reset", int64_t{1});
  set_attr(n, "direction", std::string("reverse"));
  const Graph g = import(b);
  const auto rec = recurrent_nodes(g);
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0]->cell, RnnCell::Gru);
  EXPECT_EQ(rec[0]->direction, RnnDirection::Reverse);
  EXPECT_TRUE(rec[0]->linear_before_reset);
  EXPECT_FALSE(rec[0]->has_bias || rec[0]->has_initial_h);
  EXPECT_EQ(rec[0]->hidden_size, 5);

  OnnxBuilder c;
  c.input("x", kF32, {4, 2, 3}).output("yh");
  c.initializer("w", testing::random_tensor(DType::F32, {1, 6, 3}, 1));
  c.initializer("r", testing::random_tensor(DType::F32, {1, 6, 6}, 2));
  auto& m = c.node("RNN", {"x", "w", "r"}, {"", "yh"}, "rnn");
  set_strings(m, "activations", {"Relu"});
  const Graph gr = import(c);
  const auto rr = recurrent_nodes(gr);
  ASSERT_EQ(rr.size(), 1u);
  EXPECT_EQ(rr[0]->cell, RnnCell::Rnn);
  EXPECT_EQ(rr[0]->activations, std::vector<ActKind>{ActKind::Relu});
  EXPECT_EQ(gr.shape(gr.outputs()[0]).str(), "f32[1,2,6]");
}

// A forward LSTM of one unit over two steps, computed by hand.
TEST(OnnxRnn, LstmByHand) {
  OnnxBuilder b;
  b.input("x", kF32, {2, 1, 1}).output("y").output("yh").output("yc");
  // Gates i, o, f, c: W (1, 4, 1), R (1, 4, 1), B (1, 8).
  b.initializer("w", Tensor::f32({1, 4, 1}, std::vector<float>{0.5f, -0.25f, 1.0f, 2.0f}));
  b.initializer("r", Tensor::f32({1, 4, 1}, std::vector<float>{0.1f, 0.2f, -0.3f, 0.4f}));
  b.initializer("b", Tensor::f32({1, 8}, std::vector<float>{0.0f, 0.1f, 0.2f, 0.3f, 0.05f, 0.0f, -0.1f, 0.0f}));
  b.node("LSTM", {"x", "w", "r", "b"}, {"y", "yh", "yc"}, "lstm");
  const std::vector<float> xs{1.0f, -2.0f};
  const auto outs = testing::run_cpu(import(b), {{"x", Tensor::f32({2, 1, 1}, xs)}});
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double W[4] = {0.5, -0.25, 1.0, 2.0}, R[4] = {0.1, 0.2, -0.3, 0.4};
  const double Bb[4] = {0.05, 0.1, 0.1, 0.3};  // Wb + Rb
  double h = 0, c = 0;
  std::vector<double> ys;
  for (float xv : xs) {
    auto pre = [&](int k) { return W[k] * xv + R[k] * h + Bb[k]; };
    const double i = sig(pre(0)), o = sig(pre(1)), f = sig(pre(2)), cc = std::tanh(pre(3));
    c = f * c + i * cc;
    h = o * std::tanh(c);
    ys.push_back(h);
  }
  EXPECT_TRUE(testing::all_close(outs[0], {2, 1, 1, 1}, ys));
  EXPECT_TRUE(testing::all_close(outs[1], {1, 1, 1}, {h}));
  EXPECT_TRUE(testing::all_close(outs[2], {1, 1, 1}, {c}));
}

// The sequence length stays symbolic: one import, one compile, runs of any length.
TEST(OnnxRnn, SymbolicSequenceLength) {
  OnnxBuilder b;
  b.input("x", kF32, {-1, 2, 3}, {"seq"}).output("y").output("yh");
  b.initializer("w", testing::random_tensor(DType::F32, {2, 12, 3}, 1));
  b.initializer("r", testing::random_tensor(DType::F32, {2, 12, 4}, 2));
  auto& n = b.node("GRU", {"x", "w", "r"}, {"y", "yh"}, "gru");
  set_attr(n, "direction", std::string("bidirectional"));
  const Graph g = import(b);
  EXPECT_EQ(g.shape(g.outputs()[0]).str(), "f32[seq,2,2,4]");
  Session s(Device::Cpu);
  CompiledGraph cg = s.compile(g);
  for (int64_t steps : {1, 7, 3}) {
    const Tensor x = testing::random_tensor(DType::F32, {steps, 2, 3}, 9);
    const auto outs = cg.run({{"x", x}});
    EXPECT_EQ(outs[0].shape(), (std::vector<int64_t>{steps, 2, 2, 4}));
    // The static import of the same length gives the same numbers.
    OnnxImportOptions o;
    o.dims["seq"] = steps;
    const auto want = testing::run_cpu(import(b, o), {{"x", x}});
    EXPECT_TRUE(testing::all_close(outs[1], want[1].shape(), testing::to_doubles(want[1]), {0, 0}));
  }
}

// Import no longer unrolls: any length imports; backends without the kernel unroll at compile,
// within Limits::max_unroll_steps of the compile.
TEST(OnnxRnn, UnrollCapAppliesWhereTheLayerIsUnrolled) {
  OnnxBuilder b;
  b.input("x", kF32, {17, 1, 4}).output("y");
  b.initializer("w", testing::random_tensor(DType::F32, {1, 32, 4}, 1));
  b.initializer("r", testing::random_tensor(DType::F32, {1, 32, 8}, 2));
  b.node("LSTM", {"x", "w", "r"}, {"y"}, "lstm0");
  OnnxImportOptions o;
  o.limits.max_unroll_steps = 16;
  const Graph g = import(b, o);
  ASSERT_EQ(recurrent_nodes(g).size(), 1u);
  Limits lim;
  lim.max_unroll_steps = 16;
  ScopedLimits scoped(lim);
  const passes::ClaimFn no_recurrent = [](const Graph&, const Node& n) {
    return !std::holds_alternative<ops::Recurrent>(n.op);
  };
  const std::string msg = testing::error_message([&] { (void)passes::legalize(g, no_recurrent, "test"); });
  EXPECT_THAT(msg, HasSubstr("17 time steps"));
  EXPECT_THAT(msg, HasSubstr("at most 16"));
  EXPECT_THAT(msg, HasSubstr("CompileOptions::limits.max_unroll_steps"));
  CompileOptions co;
  co.limits.max_unroll_steps = 16;  // the CPU runs it natively: no cap
  Session s(Device::Cpu);
  EXPECT_NO_THROW(s.compile(g, co).run({{"x", testing::random_tensor(DType::F32, {17, 1, 4}, 3)}}));
}

TEST(OnnxRnn, ErrorsNameTheNodeAndTheProblem) {
  auto lstm = [](const std::string& op = "LSTM", int64_t gates = 4) {
    OnnxBuilder b;
    b.input("x", kF32, {5, 2, 3}).output("y");
    b.initializer("w", testing::random_tensor(DType::F32, {1, gates * 4, 3}, 1));
    b.initializer("r", testing::random_tensor(DType::F32, {1, gates * 4, 4}, 2));
    b.node(op, {"x", "w", "r"}, {"y"}, "rnn");
    return b;
  };
  {
    OnnxBuilder b = lstm();
    set_attr(*b.graph().mutable_node(0), "input_forget", int64_t{1});
    expect_error(b, "rnn", {"input_forget=1 is not supported"});
  }
  {
    OnnxBuilder b = lstm();
    auto* a = b.graph().mutable_node(0)->add_attribute();
    a->set_name("activation_alpha");
    a->set_type(onnx::AttributeProto::FLOATS);
    a->add_floats(0.1f);
    expect_error(b, "rnn", {"activation_alpha/beta are not supported"});
  }
  {
    OnnxBuilder b = lstm();
    set_strings(*b.graph().mutable_node(0), "activations", {"Sigmoid", "LeakyRelu", "Tanh"});
    expect_error(b, "rnn", {"activation 'LeakyRelu' is not supported (Sigmoid, Tanh, Relu)"});
  }
  {
    OnnxBuilder b = lstm();
    set_strings(*b.graph().mutable_node(0), "activations", {"Sigmoid", "Tanh"});
    expect_error(b, "rnn", {"activations must list 3 per direction"});
  }
  {
    OnnxBuilder b = lstm();
    set_attr(*b.graph().mutable_node(0), "linear_before_reset", int64_t{1});
    expect_error(b, "rnn", {"linear_before_reset is a GRU attribute"});
  }
  {
    OnnxBuilder b = lstm();
    set_attr(*b.graph().mutable_node(0), "layout", int64_t{2});
    expect_error(b, "rnn", {"layout must be 0"});
  }
  {
    OnnxBuilder b = lstm();
    set_attr(*b.graph().mutable_node(0), "direction", std::string("sideways"));
    expect_error(b, "rnn", {"direction 'sideways'"});
  }
  {
    OnnxBuilder b = lstm("GRU", 3);
    b.initializer("lens", Tensor::i32({2}, std::vector<int32_t>{5, 4}));
    auto* n = b.graph().mutable_node(0);
    n->add_input("");
    n->add_input("lens");
    expect_error(b, "rnn", {"sequence_lens shorter than the sequence are not supported"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {-1, 2, 3}, {"seq"}).input("lens", kI32, {2}).output("y");
    b.initializer("w", testing::random_tensor(DType::F32, {1, 4, 3}, 1));
    b.initializer("r", testing::random_tensor(DType::F32, {1, 4, 4}, 2));
    b.node("RNN", {"x", "w", "r", "", "lens"}, {"y"}, "rnn");
    expect_error(b, "rnn", {"sequence_lens", "'seq' is symbolic"});
  }
  {
    OnnxBuilder b;
    b.input("x", kF32, {0, 2, 3}).output("y");
    b.initializer("w", testing::random_tensor(DType::F32, {1, 4, 3}, 1));
    b.initializer("r", testing::random_tensor(DType::F32, {1, 4, 4}, 2));
    b.node("RNN", {"x", "w", "r"}, {"y"}, "rnn");
    expect_error(b, "rnn", {"has no time steps or no batch"});
  }
}

}  // namespace
}  // namespace rlx
