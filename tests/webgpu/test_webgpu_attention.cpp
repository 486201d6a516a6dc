// WebGPU attention beyond the shared parity cases: every mask kind x GQA group x softcap /
// score_scale, keep masks of other dtypes (NaN keeps, whole batches masked), broadcast and -inf
// biases (a row of -inf outputs zeros), long sequences (many key tiles, more query rows than
// keys), the split-KV decode path and its combine dispatch, head dims that do not divide the
// tiles, more (batch, head, block) units than a 65535-workgroup grid, operands at element offsets,
// the refusal of what the kernel does not compute, and FusedAttentionBlock / FusedTransformerLayer
// decomposed by the shared legalize into an Attention the backend runs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "parity/attention_graph.h"
#include "support/parity.h"
#include "webgpu/webgpu_test_util.h"
#ifdef RLX_HAVE_WEBGPU
#include "backends/webgpu/lower.h"
#include "backends/webgpu/wgpu_context.h"
#include "passes/legalize.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::AttnCase;
using rlx::testing::attention_case_graph;
using rlx::testing::attention_case_name;
using rlx::testing::ParityOptions;
using rlx::testing::expect_webgpu_parity;

#ifdef RLX_HAVE_WEBGPU


// Every mask kind with MHA, GQA and MQA, with and without softcap and an explicit score_scale
// (the original RLX kernels ignored both and ran Custom masks as biases).
TEST(WebGpuAttention, MasksTimesGqaTimesSoftcap) {
  RLX_REQUIRE_WEBGPU();
  for (MaskKind m : {MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow, MaskKind::Custom, MaskKind::Bias})
    for (int64_t hkv : {int64_t{4}, int64_t{2}, int64_t{1}})
      for (bool capped : {false, true}) {
        AttnCase c{AttnLayout::BSHD, m, 2, 11, 29, 4, hkv, 24};
        if (m == MaskKind::SlidingWindow) c.window = 6;
        if (capped) c.softcap = 2.0, c.scale = 0.7;  // scores up to ~17: the cap bends them
        if (m == MaskKind::Bias) c.bias_per_row = hkv != 2;
        if (m == MaskKind::Custom) c.mask_type = hkv == 1 ? DType::F32 : DType::Bool;
        SCOPED_TRACE(attention_case_name(c));
        ParityOptions o;
        if (capped) o.lo = -2.0, o.hi = 2.0;
        expect_webgpu_parity(attention_case_graph(c, DType::F32), o);
      }
}

// The knob webgpu_attn_baked at 1 (the default on GPU adapters, not on this CPU one): the same
// kernel with its sizes as WGSL literals gives the same
// numbers (a prefill with GQA and a head_dim that does not divide the tiles, a bias mask, and a
// decode over a long KV whose keys split over workgroups).
TEST(WebGpuAttention, BakedSizesMatchTheCpu) {
  RLX_REQUIRE_WEBGPU();
  AttnCase prefill{AttnLayout::BSHD, MaskKind::Causal, 2, 11, 29, 4, 2, 24};
  AttnCase bias{AttnLayout::BHSD, MaskKind::Bias, 1, 9, 9, 2, 2, 16};
  AttnCase decode{AttnLayout::BSHD, MaskKind::Causal, 1, 1, 1100, 4, 1, 32};
  for (const AttnCase& c : {prefill, bias, decode}) {
    SCOPED_TRACE(attention_case_name(c));
    rlx::testing::RunConfig cpu, gpu;
    cpu.label = "cpu";
    gpu.label = "webgpu baked";
    gpu.device = Device::WebGpu;
    gpu.options.tuning.webgpu_attn_baked = 1;
    const Graph g = attention_case_graph(c, DType::F32);
    CompileOptions uniform;
    uniform.tuning.webgpu_attn_baked = 0;
    (void)Session(Device::WebGpu).compile(g, uniform);  // the uniform-parameter kernel
    const uint64_t before = webgpu::pipelines_created();
    const auto rep = rlx::testing::compare_configs(g, cpu, gpu, {});
    EXPECT_TRUE(rep.pass) << rep.text;
    // On a CPU adapter the default is the uniform kernel, so the baked one is a new pipeline. On a
    // GPU adapter baked is the default and an earlier test may already have made this very
    // pipeline (pipelines are cached per process), so nothing new need be created.
    if (webgpu::context().info.adapter_type == "CPU") {
      EXPECT_GT(webgpu::pipelines_created(), before) << "the baked kernel is another pipeline";
    }
  }
}

// Keep mask (B, Skv) in dtype t: batch 0 keeps every other key and has one NaN (kept), batch 1
// keeps nothing (its rows output zeros), the rest keep all keys but the first.
Tensor keep_mask(DType t, int64_t b, int64_t skv) {
  std::vector<double> d(static_cast<size_t>(b * skv), 1.0);
  for (int64_t j = 0; j < skv; ++j) {
    d[static_cast<size_t>(j)] = j % 2 == 0 ? 2.5 : 0.0;
    d[static_cast<size_t>(skv + j)] = 0.0;
  }
  d[3] = std::numeric_limits<double>::quiet_NaN();
  for (int64_t i = 2; i < b; ++i) d[static_cast<size_t>(i * skv)] = 0.0;
  if (!is_float(t))
    for (double& x : d) x = std::isnan(x) ? 1.0 : std::round(x);
  return Tensor::f64({b, skv}, d).cast(t);
}

TEST(WebGpuAttention, KeepMasksOfEveryDtype) {
  RLX_REQUIRE_WEBGPU();
  for (DType mt : {DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool})
    for (int64_t sq : {int64_t{9}, int64_t{1}}) {  // prefill and the split-KV decode path
      const int64_t skv = sq == 1 ? 600 : 45;
      AttnCase c{AttnLayout::BSHD, MaskKind::Custom, 3, sq, skv, 4, 2, 32};
      c.mask_type = mt;
      ParityOptions o;
      o.fixed_inputs = {{"mask", keep_mask(mt, 3, skv)}};
      SCOPED_TRACE(std::string(dtype_name(mt)) + " q" + std::to_string(sq));
      expect_webgpu_parity(attention_case_graph(c, DType::F32), o);
    }
}

TEST(WebGpuAttention, BroadcastAndMinusInfBiases) {
  RLX_REQUIRE_WEBGPU();
  for (int64_t sq : {int64_t{13}, int64_t{1}}) {
    AttnCase c{AttnLayout::BHSD, MaskKind::Bias, 2, sq, 280, 6, 3, 40, 0.2, 3.0};
    c.bias_per_row = false;  // [b, 1, 1, skv]: a key-padding bias
    SCOPED_TRACE("key bias q" + std::to_string(sq));
    expect_webgpu_parity(attention_case_graph(c, DType::F32));
  }
  // A rank-2 bias (Sq, Skv) with -inf entries; row 2 is -inf everywhere (it outputs zeros).
  const int64_t sq = 5, skv = 37;
  Graph g;
  ops::Attention a;
  a.num_heads = 2, a.num_kv_heads = 1, a.head_dim = 24, a.mask_kind = MaskKind::Bias, a.softcap = 2.0;
  const Value bias = g.input("bias", Shape::of({sq, skv}));
  g.add_output(g.attention(g.input("q", Shape::of({1, sq, 2, 24})), g.input("k", Shape::of({1, skv, 1, 24})),
                           g.input("v", Shape::of({1, skv, 1, 24})), bias, a));
  std::vector<float> bv(static_cast<size_t>(sq * skv));
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < skv; ++j)
      bv[static_cast<size_t>(i * skv + j)] = i == 2 || (j % 3 == 0) ? ninf : 0.1f * static_cast<float>(j % 7);
  ParityOptions o;
  o.fixed_inputs = {{"bias", Tensor::f32({sq, skv}, bv)}};
  expect_webgpu_parity(g, o);
}

// Long sequences: many key tiles per block, more query rows than keys, windows narrower than a
// split, GQA with a scale and a softcap over split keys.
TEST(WebGpuAttention, LongSequencesAndSplitKeys) {
  RLX_REQUIRE_WEBGPU();
  const std::vector<AttnCase> cases = {
      {AttnLayout::BSHD, MaskKind::Causal, 1, 300, 1200, 2, 1, 64},
      {AttnLayout::BSHD, MaskKind::Causal, 1, 300, 260, 2, 2, 32},  // the first 40 rows see no key
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 2, 3000, 4, 2, 64, 0, 0, 40},
      {AttnLayout::BHSD, MaskKind::Causal, 2, 3, 1000, 16, 2, 128, 0.05, 20.0},
      {AttnLayout::BSHD, MaskKind::None, 1, 1, 5000, 2, 1, 96},
  };
  for (const AttnCase& c : cases)
    for (DType t : {DType::F32, DType::F16}) {
      SCOPED_TRACE(attention_case_name(c) + " " + dtype_name(t));
      expect_webgpu_parity(attention_case_graph(c, t));
    }
}

TEST(WebGpuAttention, DecodeSplitsTheKeysWithACombineDispatch) {
  RLX_REQUIRE_WEBGPU();
  auto dispatches = [](const AttnCase& c) {
    return rlx::testing::webgpu_dispatches(attention_case_graph(c, DType::F32));
  };
  EXPECT_EQ(dispatches({AttnLayout::BSHD, MaskKind::Causal, 1, 1, 2048, 8, 2, 64}), 2u);  // kernel + combine
  EXPECT_EQ(dispatches({AttnLayout::BSHD, MaskKind::Causal, 1, 1, 100, 8, 2, 64}), 1u);   // too few keys to split
  EXPECT_EQ(dispatches({AttnLayout::BSHD, MaskKind::Causal, 64, 64, 300, 8, 8, 64}), 1u); // enough workgroups
}

// The Llama decode of bench_cuda (32 heads over 8 KV heads, head_dim 64, 512 keys): 8 units, so
// the keys split into 16 one-tile splits (K and V side by side, rows of K padded) and a combine;
// in both forms of the kernel (sizes as uniforms and baked), f32 and bf16.
TEST(WebGpuAttention, DecodeOfTheLlamaBenchmarkShape) {
  RLX_REQUIRE_WEBGPU();
  const AttnCase c{AttnLayout::BSHD, MaskKind::Causal, 1, 1, 512, 32, 8, 64};
  EXPECT_EQ(rlx::testing::webgpu_dispatches(attention_case_graph(c, DType::BF16)), 2u);
  for (DType t : {DType::F32, DType::BF16})
    for (int baked : {0, 1}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (baked ? " baked" : " uniform"));
      rlx::testing::RunConfig cpu, gpu;
      gpu.label = "webgpu";
      gpu.device = Device::WebGpu;
      gpu.options.tuning.webgpu_attn_baked = baked;
      const auto rep = rlx::testing::compare_configs(attention_case_graph(c, t), cpu, gpu);
      EXPECT_TRUE(rep.pass) << rep.text;
    }
}

TEST(WebGpuAttention, HeadDimsThatDoNotDivideTheTiles) {
  RLX_REQUIRE_WEBGPU();
  for (int64_t d : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{100}, int64_t{200}, int64_t{256}, int64_t{512}})
    for (MaskKind m : {MaskKind::Causal, MaskKind::SlidingWindow}) {
      AttnCase c{AttnLayout::BSHD, m, 2, 21, 21, 3, 1, d};
      if (m == MaskKind::SlidingWindow) c.window = 5;
      SCOPED_TRACE(attention_case_name(c));
      expect_webgpu_parity(attention_case_graph(c, DType::BF16));
    }
}

// More (batch, kv head, row block) units than one dispatch's workgroups (at most 8192): the
// kernel loops over them.
TEST(WebGpuAttention, MoreUnitsThanTheGrid) {
  RLX_REQUIRE_WEBGPU();
  // 2 x 4200 kv heads x 1 block of 3 rows; 2 x 2100 x 3 blocks of 16 rows (40 rows per kv head).
  expect_webgpu_parity(attention_case_graph({AttnLayout::BHSD, MaskKind::Causal, 2, 3, 5, 4200, 4200, 4}, DType::F32));
  expect_webgpu_parity(attention_case_graph({AttnLayout::BSHD, MaskKind::Causal, 2, 20, 20, 4200, 2100, 8}, DType::F32));
}

TEST(WebGpuAttention, OperandsAtElementOffsets) {
  RLX_REQUIRE_WEBGPU();
  // q, k, v as narrowed slices of one packed (B, S, 3H, D) tensor: whatever their placement,
  // the kernel reads each from its operand's offset.
  Graph g;
  const int64_t b = 2, s = 11, h = 2, d = 20;
  const Value qkv = g.input("qkv", Shape::of({b, s, 3 * h, d}));
  ops::Attention a;
  a.num_heads = h, a.num_kv_heads = h, a.head_dim = d, a.mask_kind = MaskKind::Causal;
  const Value q = g.narrow(qkv, 2, 0, h), k = g.narrow(qkv, 2, h, h), v = g.narrow(qkv, 2, 2 * h, h);
  g.add_output(g.attention(q, k, v, std::nullopt, a));
  expect_webgpu_parity(g);
}

// What the kernel does not compute is refused in the claims with the reason (then legalized or
// reported), never run wrong.
TEST(WebGpuAttention, RefusesWhatItDoesNotCompute) {
  RLX_REQUIRE_WEBGPU();
  const webgpu::DeviceInfo& info = webgpu::context().info;
  auto why = [&](const Graph& g) {
    for (const Node& n : g.nodes())
      if (std::holds_alternative<ops::Attention>(n.op)) {
        std::string reason;
        EXPECT_FALSE(webgpu::webgpu_claims_node(g, n, &info, &reason));
        return reason;
      }
    return std::string("no attention node");
  };
  // A head too wide for the workgroup memory of one row and four keys.
  const std::string wide = why(attention_case_graph({AttnLayout::BSHD, MaskKind::None, 1, 1, 4, 1, 1, 4096}, DType::F32));
  EXPECT_NE(wide.find("workgroup memory"), std::string::npos) << wide;
  // f64 is not held by WGSL.
  Graph g = attention_case_graph({AttnLayout::BSHD, MaskKind::None, 1, 2, 4, 1, 1, 8}, DType::F64);
  std::string reason;
  for (const Node& n : g.nodes()) {
    if (std::holds_alternative<ops::Attention>(n.op)) {
      EXPECT_FALSE(webgpu::webgpu_claims_node(g, n, &info, &reason));
    }
  }
  EXPECT_FALSE(reason.empty());
}

// The fused blocks are not claimed: the shared legalize expands them into ops the backend runs,
// among them one Attention; the whole block then matches the CPU.
TEST(WebGpuAttention, FusedBlocksAreDecomposedIntoAttention) {
  RLX_REQUIRE_WEBGPU();
  auto claims = [](const Graph& gg, const Node& n) { return webgpu::webgpu_claims_node(gg, n, &webgpu::context().info); };
  auto check = [&](const Graph& g, NodeId fused) {
    EXPECT_FALSE(claims(g, g.node(fused)));
    const Graph x = passes::expand_unclaimed(g, claims);
    int attentions = 0;
    for (const Node& n : x.nodes()) {
      EXPECT_TRUE(claims(x, n)) << op_name(n.op);
      if (std::holds_alternative<ops::Attention>(n.op)) ++attentions;
    }
    EXPECT_EQ(attentions, 1);
    expect_webgpu_parity(g);
  };
  {
    Graph g;
    const int64_t b = 2, s = 6, heads = 2, hd = 8, e = heads * hd;
    const Value out =
        g.apply(ops::FusedAttentionBlock{.num_heads = heads, .head_dim = hd},
                {g.input("hidden", Shape::of({b, s, e})), g.param("qkv_w", Shape::of({e, 3 * e})),
                 g.param("out_w", Shape::of({e, e})), g.input("mask", Shape::of({b, s}, DType::Bool)),
                 g.param("qkv_b", Shape::of({3 * e})), g.param("out_b", Shape::of({e}))});
    g.add_output(out);
    SCOPED_TRACE("fused_attention_block");
    check(g, out.node);
  }
  {
    Graph g;
    const int64_t b = 1, s = 5, heads = 2, hd = 4, e = heads * hd, f = 16;
    auto p = [&](const char* name, std::vector<int64_t> dims) { return g.param(name, Shape::from(dims, DType::F32)); };
    const Value out = g.apply(ops::FusedTransformerLayer{.num_heads = heads, .head_dim = hd},
                              {g.input("hidden", Shape::of({b, s, e})), p("qkv_w", {e, 3 * e}), p("qkv_b", {3 * e}),
                               p("out_w", {e, e}), p("out_b", {e}), p("ln1_g", {e}), p("ln1_b", {e}), p("fc1_w", {e, f}),
                               p("fc1_b", {f}), p("fc2_w", {f, e}), p("fc2_b", {e}), p("ln2_g", {e}), p("ln2_b", {e}),
                               g.input("mask", Shape::of({b, s}, DType::Bool))});
    g.add_output(out);
    SCOPED_TRACE("fused_transformer_layer");
    check(g, out.node);
  }
}

#endif

}  // namespace
