// Model builders (src/models): graph structure, deterministic weights, and numerics of the
// composed BERT layer and Llama block against naive double-precision references.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "models/init.h"
#include "models/transformer.h"
#include "rlx/rlx.h"

namespace rlx::models {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using Vec = std::vector<double>;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected rlx::Error";
  return "";
}

Vec doubles(const Tensor& t) { return t.to_f64(); }

// ---- naive references (row-major, double) ---------------------------------------------
// (M, K) @ (K, N)
Vec mm(const Vec& a, const Vec& b, int64_t m, int64_t k, int64_t n) {
  Vec c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
  return c;
}
void add_bias(Vec& x, const Vec& b) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += b[i % b.size()];
}
Vec add(const Vec& a, const Vec& b) {
  Vec c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
  return c;
}
Vec layer_norm(const Vec& x, int64_t e, const Vec& g, const Vec& b, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / e; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < e; ++i) mean += x[r * e + i];
    mean /= static_cast<double>(e);
    for (int64_t i = 0; i < e; ++i) var += (x[r * e + i] - mean) * (x[r * e + i] - mean);
    var /= static_cast<double>(e);
    for (int64_t i = 0; i < e; ++i) y[r * e + i] = (x[r * e + i] - mean) / std::sqrt(var + eps) * g[i] + b[i];
  }
  return y;
}
Vec rms_norm(const Vec& x, int64_t e, const Vec& g, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / e; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < e; ++i) ms += x[r * e + i] * x[r * e + i];
    ms /= static_cast<double>(e);
    for (int64_t i = 0; i < e; ++i) y[r * e + i] = x[r * e + i] / std::sqrt(ms + eps) * g[i];
  }
  return y;
}
// Attention over (B, S, H*D)-flattened q and (B, S, Hkv*D) k/v; keep(b, i, j) says whether
// query i may see key j. Rows with no visible key give zeros.
template <class Keep>
Vec attention(const Vec& q, const Vec& k, const Vec& v, int64_t bsz, int64_t s, int64_t h, int64_t hkv, int64_t d,
              Keep keep) {
  Vec out(static_cast<size_t>(bsz * s * h * d), 0.0);
  const int64_t group = h / hkv;
  for (int64_t b = 0; b < bsz; ++b)
    for (int64_t hh = 0; hh < h; ++hh) {
      const int64_t kh = hh / group;
      for (int64_t i = 0; i < s; ++i) {
        Vec sc(static_cast<size_t>(s), 0.0);
        double mx = -INFINITY;
        for (int64_t j = 0; j < s; ++j) {
          if (!keep(b, i, j)) continue;
          double dot = 0;
          for (int64_t t = 0; t < d; ++t)
            dot += q[((b * s + i) * h + hh) * d + t] * k[((b * s + j) * hkv + kh) * d + t];
          sc[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, sc[j]);
        }
        if (mx == -INFINITY) continue;
        double z = 0;
        for (int64_t j = 0; j < s; ++j) z += keep(b, i, j) ? std::exp(sc[j] - mx) : 0.0;
        for (int64_t j = 0; j < s; ++j) {
          if (!keep(b, i, j)) continue;
          const double p = std::exp(sc[j] - mx) / z;
          for (int64_t t = 0; t < d; ++t) out[((b * s + i) * h + hh) * d + t] += p * v[((b * s + j) * hkv + kh) * d + t];
        }
      }
    }
  return out;
}
// NeoX rotary embedding in place on (B, S, nh, d) with per-position angles.
void rope(Vec& x, int64_t bsz, int64_t s, int64_t nh, int64_t d, const std::vector<int64_t>& pos, double theta) {
  const int64_t half = d / 2;
  for (int64_t b = 0; b < bsz; ++b)
    for (int64_t i = 0; i < s; ++i)
      for (int64_t hh = 0; hh < nh; ++hh)
        for (int64_t t = 0; t < half; ++t) {
          const double ang = static_cast<double>(pos[i]) * std::pow(theta, -2.0 * static_cast<double>(t) / static_cast<double>(d));
          double& x1 = x[((b * s + i) * nh + hh) * d + t];
          double& x2 = x[((b * s + i) * nh + hh) * d + t + half];
          const double a = x1, c = x2;
          x1 = a * std::cos(ang) - c * std::sin(ang);
          x2 = c * std::cos(ang) + a * std::sin(ang);
        }
}

void expect_close(const Tensor& got, const std::vector<int64_t>& shape, const Vec& want, double tol) {
  ASSERT_EQ(got.shape(), shape);
  const Vec g = doubles(got);
  ASSERT_EQ(g.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - want[i]) <= tol * (1.0 + std::fabs(want[i]))) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": got " << g[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0);
}

// Random params with a larger scale than random_weights (so every term matters numerically),
// returned both as tensors for the session and as doubles for the reference.
std::map<std::string, Vec> set_random_params(const Graph& g, CompiledGraph& cg, uint64_t seed) {
  std::map<std::string, Vec> out;
  for (NodeId id : g.param_nodes()) {
    const auto& p = std::get<ops::Param>(g.node(id).op);
    Tensor t = init_tensor(p.shape.dtype, p.shape.concrete(), InitKind::Uniform, 0.5, name_seed(seed, p.name));
    if (p.name.find("norm") != std::string::npos || p.name.find(".ln") != std::string::npos) {
      // Norm scales around 1 (still distinct per channel).
      Vec v = doubles(t);
      for (auto& x : v) x += 1.0;
      t = Tensor::f64(t.shape(), v).cast(p.shape.dtype);
    }
    cg.set_param(p.name, t);
    out[p.name] = doubles(t);
  }
  return out;
}

// ---- structure -----------------------------------------------------------------------
TEST(Models, DemoGraphStructure) {
  TransformerDemoConfig cfg;  // defaults: batch 1, seq 64, hidden 256, 4 heads, 2 kv heads
  Graph g = build_transformer_block_graph(cfg);
  EXPECT_TRUE(g.verify_report().empty());
  ASSERT_EQ(g.outputs().size(), 2u);
  EXPECT_EQ(g.output_names(), (std::vector<std::string>{"llama_out", "bert_out"}));
  for (Value v : g.outputs()) EXPECT_EQ(g.shape(v), Shape::of({1, 64, 256}));
  std::vector<std::string> inputs;
  for (NodeId id : g.input_nodes()) inputs.push_back(std::get<ops::Input>(g.node(id).op).name);
  EXPECT_EQ(inputs, (std::vector<std::string>{"hidden", "positions", "mask"}));
  // 2 Llama blocks * 9 params + final norm + 1 BERT layer * 12 params.
  EXPECT_EQ(g.param_nodes().size(), 2u * 9 + 1 + 12);
  std::map<std::string, Shape> params;
  for (NodeId id : g.param_nodes()) {
    const auto& p = std::get<ops::Param>(g.node(id).op);
    EXPECT_TRUE(p.shape.is_static()) << p.name;
    params[p.name] = p.shape;
  }
  EXPECT_EQ(params.at("llama.0.attn.q.weight"), Shape::of({256, 256}));
  EXPECT_EQ(params.at("llama.1.attn.k.weight"), Shape::of({256, 128}));  // 2 kv heads * 64
  EXPECT_EQ(params.at("llama.0.mlp.gate.weight"), Shape::of({256, 704}));
  EXPECT_EQ(params.at("bert.0.attn.qkv.weight"), Shape::of({256, 768}));
  EXPECT_EQ(params.at("bert.0.ffn.fc1.weight"), Shape::of({256, 1024}));
  EXPECT_EQ(params.at("bert.0.ln2.bias"), Shape::of({256}));
  // Primitives only: no fused ops.
  for (const Node& n : g.nodes()) EXPECT_EQ(std::string(op_name(n.op)).rfind("fused", 0), std::string::npos);
}

TEST(Models, DemoGraphVariants) {
  TransformerDemoConfig cfg;
  cfg.symbolic_seq = true;
  cfg.batch = 2;
  cfg.hidden = 32;
  cfg.llama_layers = 1;
  cfg.bert_layers = 0;
  Graph g = build_transformer_block_graph(cfg);
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.output_names()[0], "llama_out");
  EXPECT_EQ(g.shape(g.outputs()[0]), Shape({2, Dim::symbol("seq"), 32}));
  EXPECT_EQ(g.input_nodes().size(), 2u);  // hidden, positions (no mask without BERT)

  cfg.dtype = DType::F16;
  cfg.llama_layers = 0;
  cfg.bert_layers = 2;
  cfg.symbolic_seq = false;
  Graph h = build_transformer_block_graph(cfg);
  EXPECT_EQ(h.shape(h.outputs()[0]), Shape::of({2, 64, 32}, DType::F16));
  EXPECT_EQ(h.param_nodes().size(), 24u);
}

TEST(Models, BuilderErrors) {
  TransformerDemoConfig cfg;
  cfg.llama_layers = cfg.bert_layers = 0;
  EXPECT_THAT(error_of([&] { build_transformer_block_graph(cfg); }), HasSubstr("not both 0"));
  cfg = {};
  cfg.num_kv_heads = 3;
  EXPECT_THAT(error_of([&] { build_transformer_block_graph(cfg); }), HasSubstr("divisible by num_kv_heads"));
  cfg = {};
  cfg.hidden = 100;
  cfg.num_heads = 3;
  EXPECT_THAT(error_of([&] { build_transformer_block_graph(cfg); }), HasSubstr("head dim"));
  cfg = {};
  cfg.dtype = DType::I32;
  EXPECT_THAT(error_of([&] { build_transformer_block_graph(cfg); }), HasSubstr("float"));

  Graph g;
  Value x = g.input("x", Shape::of({1, 4, 16}));
  Value m = g.input("m", Shape::of({1, 4}));
  BertLayerConfig bc;
  bc.hidden = 32;
  bc.num_heads = 4;
  EXPECT_THAT(error_of([&] { build_bert_layer(g, x, m, bc, "b"); }), AllOf(HasSubstr("E = 32"), HasSubstr("f32[1,4,16]")));
  bc.hidden = 16;
  bc.num_heads = 5;
  EXPECT_THAT(error_of([&] { build_bert_layer(g, x, m, bc, "b"); }), HasSubstr("divisible by num_heads"));
  LlamaBlockConfig lc;
  lc.hidden = 16;
  lc.num_heads = 4;
  lc.num_kv_heads = 3;
  EXPECT_THAT(error_of([&] { build_llama_block(g, x, x, x, lc, "l"); }), HasSubstr("num_kv_heads = 3"));
  EXPECT_THAT(error_of([&] { build_rope_tables(g, m, 3, 10000.0, DType::F32); }), HasSubstr("even"));
}

// ---- weights ---------------------------------------------------------------------------
TEST(Models, RandomWeightsAreDeterministicAndScaled) {
  TransformerDemoConfig cfg;
  cfg.hidden = 64;
  cfg.seq = 4;
  Graph g = build_transformer_block_graph(cfg);
  NamedTensors a = random_weights(g, 7), b = random_weights(g, 7), c = random_weights(g, 8);
  ASSERT_EQ(a.size(), g.param_nodes().size());
  std::set<std::string> names;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& p = std::get<ops::Param>(g.node(g.param_nodes()[i]).op);
    ASSERT_EQ(a[i].first, p.name);
    names.insert(p.name);
    EXPECT_EQ(a[i].second.shape_info(), p.shape) << p.name;
    EXPECT_EQ(doubles(a[i].second), doubles(b[i].second)) << p.name;
    const Vec v = doubles(a[i].second);
    const bool gamma = p.name.ends_with("norm.weight") || p.name.ends_with("ln1.weight") || p.name.ends_with("ln2.weight");
    const bool beta = p.name.ends_with("ln1.bias") || p.name.ends_with("ln2.bias");
    if (gamma) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 1.0; })) << p.name;
    } else if (beta) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; })) << p.name;
    } else {
      EXPECT_NE(doubles(a[i].second), doubles(c[i].second)) << p.name;
      double ss = 0;
      for (double x : v) ss += x * x;
      const double std = std::sqrt(ss / static_cast<double>(v.size()));
      EXPECT_NEAR(std, 0.02, v.size() >= 1000 ? 0.002 : 0.008) << p.name;
    }
  }
  EXPECT_EQ(names.size(), a.size());
}

TEST(Models, InitTensorKinds) {
  Tensor n = init_tensor(DType::F64, {10000}, InitKind::Normal, 2.0, 1);
  Vec v = doubles(n);
  double mean = 0, ss = 0;
  for (double x : v) mean += x;
  mean /= 1e4;
  for (double x : v) ss += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 0.0, 0.08);
  EXPECT_NEAR(std::sqrt(ss / 1e4), 2.0, 0.08);
  Vec u = doubles(init_tensor(DType::F32, {1000}, InitKind::Uniform, 0.5, 1));
  EXPECT_TRUE(std::all_of(u.begin(), u.end(), [](double x) { return x >= -0.5 && x < 0.5; }));
  Vec ints = doubles(init_tensor(DType::I64, {1000}, InitKind::Normal, 1.0, 3));
  EXPECT_TRUE(std::all_of(ints.begin(), ints.end(), [](double x) { return x >= 0 && x < 8 && x == std::floor(x); }));
  EXPECT_EQ(*std::max_element(ints.begin(), ints.end()), 7.0);
  Tensor bools = init_tensor(DType::Bool, {100}, InitKind::Normal, 1.0, 3);
  Vec bv = doubles(bools);
  EXPECT_TRUE(std::all_of(bv.begin(), bv.end(), [](double x) { return x == 0 || x == 1; }));
  EXPECT_EQ(init_tensor(DType::F16, {2, 3}, InitKind::Ones, 1, 0).to_f64(), Vec(6, 1.0));
  EXPECT_EQ(init_tensor(DType::F32, {0, 3}, InitKind::Normal, 1, 0).numel(), 0);
  EXPECT_NE(name_seed(0, "a"), name_seed(0, "b"));
  EXPECT_NE(name_seed(0, "a"), name_seed(1, "a"));
}

// ---- numerics ----------------------------------------------------------------------------
TEST(Models, BertLayerMatchesReference) {
  const int64_t B = 2, S = 5, E = 8, H = 2, D = 4, F = 12;
  Graph g;
  Value x = g.input("x", Shape::of({B, S, E}));
  Value m = g.input("mask", Shape::of({B, S}));
  BertLayerConfig cfg;
  cfg.hidden = E;
  cfg.num_heads = H;
  cfg.ffn = F;
  cfg.eps = 1e-5;
  g.add_output(build_bert_layer(g, x, m, cfg, "enc"), "out");
  g.verify();
  EXPECT_EQ(g.param_nodes().size(), 12u);

  CompiledGraph cg = Session().compile(g);
  auto P = set_random_params(g, cg, 11);
  Tensor xt = init_tensor(DType::F32, {B, S, E}, InitKind::Normal, 1.0, 5);
  Vec mask = {1, 1, 1, 0, 0, /* batch 1 */ 1, 1, 1, 1, 1};
  Tensor mt = Tensor::f64({B, S}, mask).cast(DType::F32);
  std::vector<Tensor> out = cg.run({{"x", xt}, {"mask", mt}});

  const Vec X = doubles(xt);
  Vec qkv = mm(X, P["enc.attn.qkv.weight"], B * S, E, 3 * E);
  add_bias(qkv, P["enc.attn.qkv.bias"]);
  Vec q, k, v;
  for (int64_t r = 0; r < B * S; ++r)
    for (int64_t i = 0; i < E; ++i) {
      q.push_back(qkv[r * 3 * E + i]);
      k.push_back(qkv[r * 3 * E + E + i]);
      v.push_back(qkv[r * 3 * E + 2 * E + i]);
    }
  Vec ctx = attention(q, k, v, B, S, H, H, D, [&](int64_t b, int64_t, int64_t j) { return mask[b * S + j] != 0; });
  Vec a = mm(ctx, P["enc.attn.out.weight"], B * S, E, E);
  add_bias(a, P["enc.attn.out.bias"]);
  Vec h1 = layer_norm(add(X, a), E, P["enc.ln1.weight"], P["enc.ln1.bias"], cfg.eps);
  Vec f = mm(h1, P["enc.ffn.fc1.weight"], B * S, E, F);
  add_bias(f, P["enc.ffn.fc1.bias"]);
  for (auto& t : f) t = 0.5 * t * (1.0 + std::erf(t / std::sqrt(2.0)));
  Vec f2 = mm(f, P["enc.ffn.fc2.weight"], B * S, F, E);
  add_bias(f2, P["enc.ffn.fc2.bias"]);
  Vec want = layer_norm(add(h1, f2), E, P["enc.ln2.weight"], P["enc.ln2.bias"], cfg.eps);
  expect_close(out.at(0), {B, S, E}, want, 2e-4);
}

TEST(Models, LlamaBlockMatchesReference) {
  const int64_t B = 2, S = 5, E = 16, H = 4, HKV = 2, D = 4, I = 12;
  const double theta = 500.0;
  Graph g;
  Value x = g.input("x", Shape::of({B, S, E}));
  Value pos = g.input("pos", Shape::of({S}, DType::I64));
  auto [cos, sin] = build_rope_tables(g, pos, D, theta, DType::F32);
  LlamaBlockConfig cfg;
  cfg.hidden = E;
  cfg.num_heads = H;
  cfg.num_kv_heads = HKV;
  cfg.intermediate = I;
  cfg.eps = 1e-5;
  g.add_output(build_llama_block(g, x, cos, sin, cfg, "dec"), "out");
  g.verify();
  EXPECT_EQ(g.param_nodes().size(), 9u);

  CompiledGraph cg = Session().compile(g);
  auto P = set_random_params(g, cg, 12);
  Tensor xt = init_tensor(DType::F32, {B, S, E}, InitKind::Normal, 1.0, 6);
  const std::vector<int64_t> positions = {3, 4, 5, 6, 9};
  std::vector<Tensor> out = cg.run({{"x", xt}, {"pos", Tensor::i64({S}, positions)}});

  const Vec X = doubles(xt);
  Vec xn = rms_norm(X, E, P["dec.attn_norm.weight"], cfg.eps);
  Vec q = mm(xn, P["dec.attn.q.weight"], B * S, E, H * D);
  Vec k = mm(xn, P["dec.attn.k.weight"], B * S, E, HKV * D);
  Vec v = mm(xn, P["dec.attn.v.weight"], B * S, E, HKV * D);
  rope(q, B, S, H, D, positions, theta);
  rope(k, B, S, HKV, D, positions, theta);
  Vec ctx = attention(q, k, v, B, S, H, HKV, D, [](int64_t, int64_t i, int64_t j) { return j <= i; });
  Vec h1 = add(X, mm(ctx, P["dec.attn.o.weight"], B * S, H * D, E));
  Vec y = rms_norm(h1, E, P["dec.mlp_norm.weight"], cfg.eps);
  Vec gate = mm(y, P["dec.mlp.gate.weight"], B * S, E, I);
  Vec up = mm(y, P["dec.mlp.up.weight"], B * S, E, I);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  Vec want = add(h1, mm(gate, P["dec.mlp.down.weight"], B * S, I, E));
  expect_close(out.at(0), {B, S, E}, want, 2e-4);
}

TEST(Models, DemoGraphRunsWithSymbolicSeq) {
  TransformerDemoConfig cfg;
  cfg.symbolic_seq = true;
  cfg.hidden = 32;
  cfg.num_heads = 4;
  cfg.num_kv_heads = 2;
  Graph g = build_transformer_block_graph(cfg);
  CompiledGraph cg = Session().compile(g);
  for (const auto& [name, t] : random_weights(g, 1)) cg.set_param(name, t);
  for (int64_t s : {3, 7}) {
    std::vector<int64_t> pos(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) pos[static_cast<size_t>(i)] = i;
    std::vector<Tensor> out = cg.run({{"hidden", init_tensor(DType::F32, {1, s, 32}, InitKind::Normal, 1.0, 2)},
                                      {"positions", Tensor::i64({s}, pos)},
                                      {"mask", init_tensor(DType::F32, {1, s}, InitKind::Ones, 1.0, 0)}});
    ASSERT_EQ(out.size(), 2u);
    for (const Tensor& t : out) {
      EXPECT_EQ(t.shape(), (std::vector<int64_t>{1, s, 32}));
      for (double x : doubles(t)) ASSERT_TRUE(std::isfinite(x));
    }
    // The BERT branch ends in a LayerNorm with gamma 1, beta 0: each row has mean 0, var 1.
    const Vec b = doubles(out[1]);
    for (int64_t r = 0; r < s; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < 32; ++i) mean += b[r * 32 + i] / 32.0;
      for (int64_t i = 0; i < 32; ++i) var += (b[r * 32 + i] - mean) * (b[r * 32 + i] - mean) / 32.0;
      EXPECT_NEAR(mean, 0.0, 1e-5);
      EXPECT_NEAR(var, 1.0, 1e-3);
    }
  }
}

}  // namespace
}  // namespace rlx::models
