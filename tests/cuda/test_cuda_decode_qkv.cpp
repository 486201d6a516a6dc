// Decode from the QKV product to the attention's result in one clustered kernel (plan_decode_qkv,
// attn_decode_qkv): which products the planner hands to the attention (on the Schedule, no device
// needed), the kernel source compiling for sm_90 (NVRTC, no device needed), parity with the CPU
// oracle across shapes, masks, RoPE styles and cluster sizes, and the near misses.
#ifdef RLX_HAVE_CUDA
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "plan/schedule.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using rlx::testing::ScopedEnv;

struct QkvDecode {
  DType t = DType::BF16;
  int64_t heads = 8, kv_heads = 2, hd = 64, past = 100, hidden = 256, batch = 1, q_len = 1;
  bool rope = true, norm = true, bias = false;
  RopeStyle style = RopeStyle::NeoX;
  MaskKind mask = MaskKind::Causal;
  int64_t window = 0;
  double softcap = 0;
  bool product_output = false;  // the QKV product is also a graph output
};

// RmsNorm -> one product for q, k and v -> narrows -> RoPE -> KV-cache concats -> attention.
Graph qkv_decode_graph(const QkvDecode& c) {
  Graph g;
  const Value x = g.input("x", Shape::of({c.batch, c.q_len, c.hidden}, c.t));
  const Value h = c.norm ? g.rms_norm(x, g.param("norm", Shape::of({c.hidden}, c.t))) : x;
  const int64_t n = (c.heads + 2 * c.kv_heads) * c.hd;
  Value qkv = g.matmul(h, g.param("w", Shape::of({c.hidden, n}, c.t)));
  if (c.bias) qkv = g.add(qkv, g.param("b", Shape::of({n}, c.t)));
  auto part = [&](int64_t start, int64_t heads) {
    return g.reshape(g.narrow(qkv, 2, start * c.hd, heads * c.hd), {c.batch, c.q_len, heads, c.hd});
  };
  Value q = part(0, c.heads), k = part(c.heads, c.kv_heads);
  const Value v = part(c.heads + c.kv_heads, c.kv_heads);
  if (c.rope) {
    const Value cs = g.input("cos", Shape::of({c.q_len, c.hd / 2}, c.t));
    const Value sn = g.input("sin", Shape::of({c.q_len, c.hd / 2}, c.t));
    q = g.rope(q, cs, sn, c.hd, c.hd, c.style);
    k = g.rope(k, cs, sn, c.hd, c.hd, c.style);
  }
  const Shape cache = Shape::of({c.batch, c.past, c.kv_heads, c.hd}, c.t);
  const Value kc = g.concat({g.param("k_cache", cache), k}, 1), vc = g.concat({g.param("v_cache", cache), v}, 1);
  ops::Attention a;
  a.num_heads = c.heads, a.num_kv_heads = c.kv_heads, a.head_dim = c.hd, a.mask_kind = c.mask;
  a.window = c.window, a.softcap = c.softcap;
  g.add_output(g.reshape(g.attention(q, kc, vc, std::nullopt, a), {c.batch, c.q_len, c.heads * c.hd}));
  if (c.product_output) g.add_output(qkv);
  return g;
}

// How many products the planner hands to attentions (the variant's plans, in its order).
size_t planned(const Graph& g) {
  const plan::Schedule s = plan::build_schedule(g);
  const auto prologues = cuda::plan_gemv_prologues(s, Precision::Fp32);
  const auto concats = cuda::plan_attention_concats(s);
  std::map<size_t, std::vector<size_t>> taken = concats;
  for (const auto& [attn, ropes] : cuda::plan_attention_ropes(s, concats))
    taken[attn].insert(taken[attn].end(), ropes.begin(), ropes.end());
  const auto plan = cuda::plan_decode_qkv(s, taken, prologues, Precision::Fp32);
  for (const auto& [attn, product] : plan) {
    EXPECT_TRUE(std::holds_alternative<ops::Attention>(s.steps[attn].op));
    EXPECT_TRUE(std::holds_alternative<ops::MatMul>(s.steps[product].op));
  }
  return plan.size();
}

TEST(CudaDecodeQkv, PlannerHandsTheQkvProductToTheAttention) {
  EXPECT_EQ(planned(qkv_decode_graph({})), 1u);
  QkvDecode c;
  c.rope = false, c.norm = false;
  EXPECT_EQ(planned(qkv_decode_graph(c)), 1u);
  c = {};
  c.t = DType::F16;
  EXPECT_EQ(planned(qkv_decode_graph(c)), 1u);
  c = {};
  c.mask = MaskKind::SlidingWindow, c.window = 16;
  EXPECT_EQ(planned(qkv_decode_graph(c)), 1u);
  c = {};
  c.style = RopeStyle::GptJ;
  EXPECT_EQ(planned(qkv_decode_graph(c)), 1u);
}

TEST(CudaDecodeQkv, NearMissesKeepTheProduct) {
  QkvDecode c;
  c.product_output = true;  // the product is stored anyway
  EXPECT_EQ(planned(qkv_decode_graph(c)), 0u);
  c = {};
  c.t = DType::F32;  // the kernel is for f16 / bf16
  EXPECT_EQ(planned(qkv_decode_graph(c)), 0u);
  c = {};
  c.batch = 2;
  EXPECT_EQ(planned(qkv_decode_graph(c)), 0u);
  c = {};
  c.q_len = 2;
  EXPECT_EQ(planned(qkv_decode_graph(c)), 0u);
  c = {};
  c.hd = 48;  // head_dim not a multiple of 32
  EXPECT_EQ(planned(qkv_decode_graph(c)), 0u);
  c = {};
  c.heads = 34, c.kv_heads = 2;  // 17 query heads per KV head
  EXPECT_EQ(planned(qkv_decode_graph(c)), 0u);
}

TEST(CudaDecodeQkv, KernelSourceCompiles) {
  for (DType t : {DType::BF16, DType::F16})
    for (int pro : {0, 1}) {
      cuda::GemvConfig cfg;
      cfg.t = cfg.bias_t = t;
      cfg.prologue = pro, cfg.gain_static = pro == 1, cfg.bias = pro == 0 ? 2 : 0;
      cuda::DecodeQkvShape s;
      s.t = s.tc = t;
      s.rope = pro == 1, s.mask = pro == 1 ? 1 : 2, s.softcap = pro == 0;
      for (int64_t hd : {32, 64, 128}) {
        s.head_dim = hd;
        SCOPED_TRACE(std::string(dtype_name(t)) + " prologue " + std::to_string(pro) + " head_dim " + std::to_string(hd));
        EXPECT_GT(cuda::nvrtc_compile("attn_decode_qkv", cuda::decode_qkv_source(cfg, s), "sm_90").size(), 100u);
      }
    }
  cuda::GemvConfig cfg;
  cfg.t = cfg.bias_t = DType::BF16;
  cuda::DecodeQkvShape s;
  s.group = 16, s.cluster = 2, s.warps = 16, s.keys_per_block = 300, s.rope_static = true;
  EXPECT_GT(cuda::nvrtc_compile("attn_decode_qkv", cuda::decode_qkv_source(cfg, s), "sm_90").size(), 100u);
  s.group = 17;  // more query heads than warps
  EXPECT_THROW(cuda::decode_qkv_source(cfg, s), Error);
  s = {};
  s.head_dim = 80;
  EXPECT_THROW(cuda::decode_qkv_source(cfg, s), Error);
}

// Parity with the CPU, and the fused launch taken (counted).
void expect_fused(const QkvDecode& c, bool taken = true) {
  const uint64_t before = cuda::attention_qkv_decodes();
  rlx::testing::expect_cuda_parity(qkv_decode_graph(c));
  EXPECT_EQ(cuda::attention_qkv_decodes(), before + (taken ? 1 : 0));
}

TEST(CudaDecodeQkv, MatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  for (DType t : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    QkvDecode c;
    c.t = t;
    expect_fused(c);
    QkvDecode d = c;
    d.style = RopeStyle::GptJ, d.past = 1;  // two keys
    expect_fused(d);
    d = c;
    d.rope = false, d.norm = false, d.bias = true, d.mask = MaskKind::None;
    expect_fused(d);
    d = c;
    d.mask = MaskKind::SlidingWindow, d.window = 37, d.softcap = 20;
    expect_fused(d);
    d = c;
    d.heads = 4, d.kv_heads = 4, d.hd = 128, d.past = 600;  // one query head per KV head
    expect_fused(d);
    d = c;
    d.heads = 32, d.kv_heads = 2, d.hd = 32, d.hidden = 512, d.past = 2047;  // 16 per KV head
    expect_fused(d);
    d = c;
    d.heads = 24, d.kv_heads = 3, d.hd = 96, d.past = 5;  // some blocks without keys
    expect_fused(d);
  }
}

TEST(CudaDecodeQkv, EveryClusterSizeMatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  for (const char* size : {"2", "4", "8", "16"}) {
    SCOPED_TRACE(std::string("cluster ") + size);
    ScopedEnv cl("RLX_CUDA_DECODE_QKV_CLUSTER", size);
    expect_fused({});
    for (const char* warps : {"8", "32"}) {
      ScopedEnv w("RLX_CUDA_DECODE_QKV_WARPS", warps);
      QkvDecode c;
      c.past = 300;
      expect_fused(c);
    }
  }
}

TEST(CudaDecodeQkv, NearMissesAndTheSwitchMatchTheCpu) {
  RLX_REQUIRE_CUDA();
  QkvDecode c;
  c.product_output = true;
  expect_fused(c, false);
  c = {};
  c.t = DType::F32;
  expect_fused(c, false);
  {
    ScopedEnv off("RLX_CUDA_DECODE_QKV", "0");
    expect_fused({}, false);
  }
  {
    ScopedEnv w("RLX_CUDA_DECODE_QKV_WARPS", "2");  // fewer warps than query heads: separate launches
    expect_fused({}, false);
  }
  ScopedEnv bad("RLX_CUDA_DECODE_QKV_CLUSTER", "3");
  EXPECT_THROW(Session(Device::Cuda).compile(qkv_decode_graph({})), Error);
}

}  // namespace
#endif  // RLX_HAVE_CUDA
