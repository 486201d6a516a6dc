// ONNX CausalConvWithState and LinearAttention (opset 27) against naive references written from
// the operators' definitions, and their malformed forms.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "onnx/onnx_builder.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;

// ---- CausalConvWithState -------------------------------------------------------------------

struct ConvState {
  int64_t batch = 2, channels = 3, length = 5, kernel = 3;
  bool bias = true, past = true;
  std::string activation = {};  // "" = attribute absent
};

OnnxBuilder conv_state_model(const ConvState& s) {
  OnnxBuilder b(27, 11);
  b.input("x", kF32, {s.batch, s.channels, s.length}).input("w", kF32, {s.channels, 1, s.kernel});
  std::vector<std::string> ins{"x", "w", s.bias ? "bias" : "", s.past ? "past" : ""};
  if (s.bias) b.input("bias", kF32, {s.channels});
  if (s.past) b.input("past", kF32, {s.batch, s.channels, s.kernel - 1});
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  b.output("y").output("state");
  auto& n = b.node("CausalConvWithState", ins, {"y", "state"}, "cconv");
  if (!s.activation.empty()) set_attr(n, "activation", s.activation);
  return b;
}

// y[b, c, t] = sum_k w[c, k] * padded[b, c, t + k] (+ bias[c]), padded = past | x along time.
std::pair<std::vector<double>, std::vector<double>> conv_state_reference(const ConvState& s, const Tensor& x,
                                                                         const Tensor& w, const Tensor* bias,
                                                                         const Tensor* past) {
  const int64_t km1 = s.kernel - 1, plen = s.length + km1;
  const auto xv = x.to_f32(), wv = w.to_f32();
  std::vector<double> y, state;
  for (int64_t bi = 0; bi < s.batch; ++bi)
    for (int64_t c = 0; c < s.channels; ++c) {
      std::vector<double> padded(static_cast<size_t>(plen), 0.0);
      for (int64_t t = 0; t < km1; ++t)
        if (past) padded[static_cast<size_t>(t)] = past->to_f32()[static_cast<size_t>((bi * s.channels + c) * km1 + t)];
      for (int64_t t = 0; t < s.length; ++t)
        padded[static_cast<size_t>(km1 + t)] = xv[static_cast<size_t>((bi * s.channels + c) * s.length + t)];
      for (int64_t t = 0; t < s.length; ++t) {
        double acc = bias ? bias->to_f32()[static_cast<size_t>(c)] : 0.0;
        for (int64_t k = 0; k < s.kernel; ++k)
          acc += wv[static_cast<size_t>(c * s.kernel + k)] * padded[static_cast<size_t>(t + k)];
        if (!s.activation.empty() && s.activation != "none") acc = acc / (1.0 + std::exp(-acc));
        y.push_back(acc);
      }
      for (int64_t t = 0; t < km1; ++t) state.push_back(padded[static_cast<size_t>(s.length + t)]);
    }
  return {y, state};
}

void check_conv_state(const ConvState& s) {
  SCOPED_TRACE("kernel " + std::to_string(s.kernel) + " length " + std::to_string(s.length) + " activation '" +
               s.activation + "'" + (s.bias ? " bias" : "") + (s.past ? " past" : ""));
  const Tensor x = testing::random_tensor(DType::F32, {s.batch, s.channels, s.length}, 1);
  const Tensor w = testing::random_tensor(DType::F32, {s.channels, 1, s.kernel}, 2);
  const Tensor bias = testing::random_tensor(DType::F32, {s.channels}, 3);
  const Tensor past = testing::random_tensor(DType::F32, {s.batch, s.channels, s.kernel - 1}, 4);
  NamedTensors feeds{{"x", x}, {"w", w}};
  if (s.bias) feeds.emplace_back("bias", bias);
  if (s.past) feeds.emplace_back("past", past);
  const auto got = testing::run_cpu(testing::import_built(conv_state_model(s)), feeds);
  const auto [y, state] = conv_state_reference(s, x, w, s.bias ? &bias : nullptr, s.past ? &past : nullptr);
  EXPECT_TRUE(testing::all_close(got.at(0), {s.batch, s.channels, s.length}, y));
  EXPECT_TRUE(testing::all_close(got.at(1), {s.batch, s.channels, s.kernel - 1}, state));
}

TEST(OnnxCausalConvWithState, MatchesTheReference) {
  check_conv_state({});
  check_conv_state({.bias = false, .past = false});
  check_conv_state({.activation = "silu"});
  check_conv_state({.bias = false, .activation = "swish"});
  check_conv_state({.length = 2, .kernel = 5, .past = false});  // shorter than the kernel: state reaches into the zeros
  check_conv_state({.kernel = 1});                             // no state: (B, C, 0)
}

// Streaming: two chunks with the state carried between them give the whole sequence's output.
TEST(OnnxCausalConvWithState, ChunksWithCarriedStateEqualTheWholeSequence) {
  const ConvState whole{.length = 6, .past = false}, chunk{.length = 3};
  const Tensor x = testing::random_tensor(DType::F32, {2, 3, 6}, 5);
  const Tensor w = testing::random_tensor(DType::F32, {3, 1, 3}, 6);
  const Tensor bias = testing::random_tensor(DType::F32, {3}, 7);
  const auto all = testing::run_cpu(testing::import_built(conv_state_model(whole)), {{"x", x}, {"w", w}, {"bias", bias}});
  auto half = [&](int64_t from) {
    std::vector<float> v;
    const auto xv = x.to_f32();
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t t = from; t < from + 3; ++t) v.push_back(xv[static_cast<size_t>(r * 6 + t)]);
    return Tensor::f32({2, 3, 3}, v);
  };
  const Graph g = testing::import_built(conv_state_model(chunk));
  const Tensor zeros = Tensor::f32({2, 3, 2}, std::vector<float>(12, 0.0f));
  const auto first = testing::run_cpu(g, {{"x", half(0)}, {"w", w}, {"bias", bias}, {"past", zeros}});
  const auto second = testing::run_cpu(g, {{"x", half(3)}, {"w", w}, {"bias", bias}, {"past", first.at(1)}});
  const auto a = all.at(0).to_f32(), y1 = first.at(0).to_f32(), y2 = second.at(0).to_f32();
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t t = 0; t < 6; ++t) {
      const float want = a[static_cast<size_t>(r * 6 + t)];
      const float got = t < 3 ? y1[static_cast<size_t>(r * 3 + t)] : y2[static_cast<size_t>(r * 3 + t - 3)];
      EXPECT_NEAR(got, want, 1e-5f) << "row " << r << " t " << t;
    }
}

TEST(OnnxCausalConvWithState, MalformedNodesAreRefused) {
  auto error_of = [](const OnnxBuilder& b) { return testing::error_message([&] { testing::import_built(b); }); };
  EXPECT_THAT(error_of(conv_state_model({.activation = "gelu"})), HasSubstr("attribute 'activation' is 'gelu'"));
  OnnxBuilder wrong_weight(27, 11);
  wrong_weight.input("x", kF32, {1, 3, 4}).input("w", kF32, {3, 2, 3}).output("y");
  wrong_weight.node("CausalConvWithState", {"x", "w"}, {"y"}, "cconv");
  EXPECT_THAT(error_of(wrong_weight), HasSubstr("weight must be (channels, 1, kernel)"));
  OnnxBuilder wrong_state(27, 11);
  wrong_state.input("x", kF32, {1, 3, 4}).input("w", kF32, {3, 1, 3}).input("p", kF32, {1, 3, 4}).output("y");
  wrong_state.node("CausalConvWithState", {"x", "w", "", "p"}, {"y"}, "cconv");
  EXPECT_THAT(error_of(wrong_state), HasSubstr("past_state must be f32[1,3,2]"));
}

// ---- LinearAttention -----------------------------------------------------------------------

struct LinAttn {
  int64_t batch = 2, steps = 3, hq = 4, hkv = 2, dk = 4, dv = 3;
  std::string rule = "gated_delta";
  bool past = false, scalar_beta = false, head_decay = false;
  double scale = 0;  // 0: the default 1/sqrt(dk)
};

OnnxBuilder lin_attn_model(const LinAttn& s) {
  OnnxBuilder b(27, 11);
  const bool gated = s.rule == "gated" || s.rule == "gated_delta", delta = s.rule == "delta" || s.rule == "gated_delta";
  b.input("q", kF32, {s.batch, s.steps, s.hq * s.dk}).input("k", kF32, {s.batch, s.steps, s.hkv * s.dk});
  b.input("v", kF32, {s.batch, s.steps, s.hkv * s.dv});
  if (s.past) b.input("past", kF32, {s.batch, s.hkv, s.dk, s.dv});
  if (gated) b.input("decay", kF32, {s.batch, s.steps, s.head_decay ? s.hkv : s.hkv * s.dk});
  if (delta) b.input("beta", kF32, {s.batch, s.steps, s.scalar_beta ? 1 : s.hkv});
  b.output("o").output("state");
  std::vector<std::string> ins{"q", "k", "v", s.past ? "past" : "", gated ? "decay" : "", delta ? "beta" : ""};
  while (ins.back().empty()) ins.pop_back();
  auto& n = b.node("LinearAttention", ins, {"o", "state"}, "la");
  set_attr(n, "q_num_heads", s.hq);
  set_attr(n, "kv_num_heads", s.hkv);
  if (s.rule != "gated_delta") set_attr(n, "update_rule", s.rule);
  if (s.scale != 0) set_attr(n, "scale", static_cast<float>(s.scale));
  return b;
}

// The recurrence, one (batch, KV head) state matrix S (dk x dv) at a time, in double.
std::pair<std::vector<double>, std::vector<double>> lin_attn_reference(const LinAttn& s, const NamedTensors& in) {
  auto get = [&](const std::string& name) {
    for (const auto& [n, t] : in)
      if (n == name) return t.to_f32();
    return std::vector<float>{};
  };
  const auto q = get("q"), k = get("k"), v = get("v"), past = get("past"), decay = get("decay"), beta = get("beta");
  const bool gated = !decay.empty(), delta = !beta.empty();
  const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.dk));
  const int64_t group = s.hq / s.hkv;
  std::vector<double> out(static_cast<size_t>(s.batch * s.steps * s.hq * s.dv)), state;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hkv; ++h) {
      std::vector<double> S(static_cast<size_t>(s.dk * s.dv), 0.0);
      if (!past.empty())
        for (int64_t i = 0; i < s.dk * s.dv; ++i) S[static_cast<size_t>(i)] = past[static_cast<size_t>((b * s.hkv + h) * s.dk * s.dv + i)];
      for (int64_t t = 0; t < s.steps; ++t) {
        const int64_t row = b * s.steps + t;
        auto kk = [&](int64_t i) { return static_cast<double>(k[static_cast<size_t>((row * s.hkv + h) * s.dk + i)]); };
        auto vv = [&](int64_t j) { return static_cast<double>(v[static_cast<size_t>((row * s.hkv + h) * s.dv + j)]); };
        if (gated)
          for (int64_t i = 0; i < s.dk; ++i) {
            const auto at = s.head_decay ? static_cast<size_t>(row * s.hkv + h) : static_cast<size_t>((row * s.hkv + h) * s.dk + i);
            for (int64_t j = 0; j < s.dv; ++j) S[static_cast<size_t>(i * s.dv + j)] *= std::exp(static_cast<double>(decay[at]));
          }
        std::vector<double> w(static_cast<size_t>(s.dv));
        for (int64_t j = 0; j < s.dv; ++j) {
          double r = 0;
          for (int64_t i = 0; i < s.dk; ++i) r += S[static_cast<size_t>(i * s.dv + j)] * kk(i);
          const double bt = delta ? beta[static_cast<size_t>(row * (s.scalar_beta ? 1 : s.hkv) + (s.scalar_beta ? 0 : h))] : 1.0;
          w[static_cast<size_t>(j)] = delta ? bt * (vv(j) - r) : vv(j);
        }
        for (int64_t i = 0; i < s.dk; ++i)
          for (int64_t j = 0; j < s.dv; ++j) S[static_cast<size_t>(i * s.dv + j)] += kk(i) * w[static_cast<size_t>(j)];
        for (int64_t g = 0; g < group; ++g) {
          const int64_t qh = h * group + g;
          for (int64_t j = 0; j < s.dv; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < s.dk; ++i)
              acc += q[static_cast<size_t>((row * s.hq + qh) * s.dk + i)] * S[static_cast<size_t>(i * s.dv + j)];
            out[static_cast<size_t>((row * s.hq + qh) * s.dv + j)] = scale * acc;
          }
        }
      }
      state.insert(state.end(), S.begin(), S.end());
    }
  return {out, state};
}

void check_lin_attn(const LinAttn& s) {
  SCOPED_TRACE(s.rule + " hq " + std::to_string(s.hq) + " hkv " + std::to_string(s.hkv) + (s.past ? " past" : ""));
  NamedTensors in{{"q", testing::random_tensor(DType::F32, {s.batch, s.steps, s.hq * s.dk}, 11)},
                  {"k", testing::random_tensor(DType::F32, {s.batch, s.steps, s.hkv * s.dk}, 12)},
                  {"v", testing::random_tensor(DType::F32, {s.batch, s.steps, s.hkv * s.dv}, 13)}};
  if (s.past) in.emplace_back("past", testing::random_tensor(DType::F32, {s.batch, s.hkv, s.dk, s.dv}, 14));
  if (s.rule == "gated" || s.rule == "gated_delta")
    in.emplace_back("decay", testing::random_tensor(DType::F32, {s.batch, s.steps, s.head_decay ? s.hkv : s.hkv * s.dk}, 15, -0.5, 0.0));
  if (s.rule == "delta" || s.rule == "gated_delta")
    in.emplace_back("beta", testing::random_tensor(DType::F32, {s.batch, s.steps, s.scalar_beta ? 1 : s.hkv}, 16, 0.0, 1.0));
  const auto got = testing::run_cpu(testing::import_built(lin_attn_model(s)), in);
  const auto [o, state] = lin_attn_reference(s, in);
  EXPECT_TRUE(testing::all_close(got.at(0), {s.batch, s.steps, s.hq * s.dv}, o));
  EXPECT_TRUE(testing::all_close(got.at(1), {s.batch, s.hkv, s.dk, s.dv}, state));
}

TEST(OnnxLinearAttention, EveryUpdateRuleMatchesTheReference) {
  for (const char* rule : {"linear", "gated", "delta", "gated_delta"}) check_lin_attn({.rule = rule});
  check_lin_attn({.past = true, .scalar_beta = true, .head_decay = true, .scale = 0.3});
  check_lin_attn({.steps = 1, .hq = 3, .hkv = 1, .past = true});  // a decode step, one KV head for every query head
}

TEST(OnnxLinearAttention, MalformedNodesAreRefused) {
  auto error_of = [](const OnnxBuilder& b) { return testing::error_message([&] { testing::import_built(b); }); };
  EXPECT_THAT(error_of(lin_attn_model({.hq = 3, .hkv = 2})), HasSubstr("q_num_heads a multiple of kv_num_heads"));
  OnnxBuilder b = lin_attn_model({.rule = "linear"});
  for (auto& a : *b.graph().mutable_node(0)->mutable_attribute())
    if (a.name() == "update_rule") a.set_s("retention");
  EXPECT_THAT(error_of(b), HasSubstr("attribute 'update_rule' is 'retention'"));
  OnnxBuilder no_beta = lin_attn_model({.rule = "gated"});
  for (auto& a : *no_beta.graph().mutable_node(0)->mutable_attribute())
    if (a.name() == "update_rule") a.set_s("gated_delta");
  EXPECT_THAT(error_of(no_beta), HasSubstr("update_rule gated_delta needs the beta input"));
}

}  // namespace
}  // namespace rlx
