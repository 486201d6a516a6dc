// Vulkan attention beyond the shared parity cases: keep masks of other dtypes (NaN keeps, whole
// batches masked), broadcast and -inf biases, the split-KV path (splits with no visible key,
// more query rows than keys, GQA groups over several row blocks), head dims that do not divide
// the tiles, the decode kernel's rows and ranges, operands at element offsets (slices of one packed tensor), the dispatch count of
// the split path, f64 (exp and tanh in double), the honest refusals (head_dim > 256, f64 tiles
// beyond the device's shared memory), and FusedAttentionBlock decomposed
// by the shared legalize into an Attention the backend runs; the cooperative-matrix kernel's
// GLSL for every configuration (compiled here), and its parity where the device has it.
#include <cmath>
#include <iostream>
#include <limits>
#include <vector>

#include "parity/attention_graph.h"
#include "vulkan/vulkan_test_util.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/glsl_compile.h"
#include "backends/vulkan/lower.h"
#include "backends/vulkan/spirv_coopmat.h"
#include "backends/vulkan/variant.h"
#include "passes/legalize.h"
#include "plan/schedule.h"
#include "plan/step_family.h"
#include "vulkan/source_only_context.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::AttnCase;
using rlx::testing::attention_case_graph;
using rlx::testing::expect_vulkan_parity;
using rlx::testing::ParityOptions;
using rlx::testing::random_tensor;
using rlx::testing::SourceOnlyContext;

#ifdef RLX_HAVE_VULKAN

// The graph's only Attention node.
const Node& attention_node(const Graph& g) {
  for (const Node& n : g.nodes())
    if (std::holds_alternative<ops::Attention>(n.op)) return n;
  throw Error("test: no attention node");
}

// Keep mask (B, Skv) in dtype t: batch 0 keeps every other key and has one NaN (kept), batch 1
// keeps nothing (its rows output zeros), the rest keep all keys but the first.
Tensor keep_mask(DType t, int64_t b, int64_t skv) {
  std::vector<float> m(static_cast<size_t>(b * skv), 1.0f);
  for (int64_t j = 0; j < skv; ++j) {
    m[static_cast<size_t>(j)] = j % 2 == 0 ? 2.5f : 0.0f;
    m[static_cast<size_t>(skv + j)] = 0.0f;
  }
  m[3] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 2; i < b; ++i) m[static_cast<size_t>(i * skv)] = 0.0f;
  std::vector<double> d(m.begin(), m.end());
  if (t == DType::Bool || t == DType::I64 || t == DType::I32 || t == DType::U8)
    for (double& x : d) x = std::isnan(x) ? 1.0 : std::round(x);
  return Tensor::f64({b, skv}, d).cast(t);
}

TEST(VulkanAttention, KeepMasksOfEveryDtype) {
  RLX_REQUIRE_VULKAN();
  for (DType mt : {DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool})
    for (int64_t sq : {int64_t{9}, int64_t{1}}) {  // prefill and the split-KV decode path
      const int64_t skv = sq == 1 ? 300 : 45;
      AttnCase c{AttnLayout::BSHD, MaskKind::Custom, 3, sq, skv, 4, 2, 32};
      c.mask_type = mt;
      ParityOptions o;
      o.fixed_inputs = {{"mask", keep_mask(mt, 3, skv)}};
      SCOPED_TRACE(std::string(dtype_name(mt)) + " q" + std::to_string(sq));
      expect_vulkan_parity(attention_case_graph(c, DType::F32), Precision::Fp32, o);
    }
}

TEST(VulkanAttention, BroadcastAndMinusInfBiases) {
  RLX_REQUIRE_VULKAN();
  for (int64_t sq : {int64_t{13}, int64_t{1}}) {
    AttnCase c{AttnLayout::BHSD, MaskKind::Bias, 2, sq, 280, 6, 3, 40, 0.2, 3.0};
    c.bias_per_row = false;  // [b, 1, 1, skv]: a key-padding bias
    SCOPED_TRACE("key bias q" + std::to_string(sq));
    expect_vulkan_parity(attention_case_graph(c, DType::F32));
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
  expect_vulkan_parity(g, Precision::Fp32, o);
}

TEST(VulkanAttention, SplitKeysEdgeCases) {
  RLX_REQUIRE_VULKAN();
  const std::vector<AttnCase> cases = {
      // a window narrower than a split: most splits see no key
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 2, 1500, 4, 2, 64, 0, 0, 40},
      // more query rows than keys: the first 40 rows see no key
      {AttnLayout::BSHD, MaskKind::Causal, 1, 300, 260, 2, 2, 32},
      // GQA rows (q_len x group = 24) over two row blocks, split keys, softcap and a scale
      {AttnLayout::BHSD, MaskKind::Causal, 2, 3, 1000, 16, 2, 128, 0.05, 20.0},
      // q_len 8 decode over a long cache, group 4 (32 rows per KV head)
      {AttnLayout::BSHD, MaskKind::None, 1, 8, 777, 8, 2, 96},
  };
  for (const AttnCase& c : cases)
    for (DType t : {DType::F32, DType::F16}) {
      SCOPED_TRACE(rlx::testing::attention_case_name(c) + " " + dtype_name(t));
      expect_vulkan_parity(attention_case_graph(c, t), t == DType::F32 ? Precision::Fp32 : Precision::Fp16);
    }
}

TEST(VulkanAttention, DecodeKernelRowsAndRanges) {
  RLX_REQUIRE_VULKAN();
  // The decode kernel takes up to 16 rows per KV head (q_len x group): every row of the group in
  // one workgroup, each with its own causal / window range, over key chunks of 128 and splits.
  const std::vector<AttnCase> cases = {
      {AttnLayout::BSHD, MaskKind::Causal, 1, 4, 600, 16, 4, 64},              // 16 rows, split
      {AttnLayout::BHSD, MaskKind::SlidingWindow, 2, 3, 300, 6, 2, 40, 0, 0, 2},  // 9 rows, narrow window
      {AttnLayout::BSHD, MaskKind::Causal, 1, 12, 12, 1, 1, 20},               // every row sees fewer keys than 128
      {AttnLayout::BSHD, MaskKind::None, 1, 16, 140, 2, 2, 36, 0, 4.0},        // two key chunks, softcap
  };
  for (const AttnCase& c : cases)
    for (DType t : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(rlx::testing::attention_case_name(c) + " " + dtype_name(t));
      expect_vulkan_parity(attention_case_graph(c, t), Precision::Fp32);
    }
}

TEST(VulkanAttention, HeadDimsThatDoNotDivideTheTiles) {
  RLX_REQUIRE_VULKAN();
  for (int64_t d : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{100}, int64_t{200}, int64_t{256}})
    for (MaskKind m : {MaskKind::Causal, MaskKind::SlidingWindow}) {
      AttnCase c{AttnLayout::BSHD, m, 2, 21, 21, 3, 1, d};
      if (m == MaskKind::SlidingWindow) c.window = 5;
      SCOPED_TRACE(rlx::testing::attention_case_name(c));
      expect_vulkan_parity(attention_case_graph(c, DType::BF16), Precision::Fp32);
    }
}

TEST(VulkanAttention, OperandsAtElementOffsets) {
  RLX_REQUIRE_VULKAN();
  // q, k, v as narrowed slices of one packed (B, S, 3H, D) tensor, then made dense by the
  // planner: whatever their placement, the kernel reads each from its operand's offset.
  Graph g;
  const int64_t b = 2, s = 11, h = 2, d = 20;
  const Value qkv = g.input("qkv", Shape::of({b, s, 3 * h, d}));
  ops::Attention a;
  a.num_heads = h, a.num_kv_heads = h, a.head_dim = d, a.mask_kind = MaskKind::Causal;
  const Value q = g.narrow(qkv, 2, 0, h), k = g.narrow(qkv, 2, h, h), v = g.narrow(qkv, 2, 2 * h, h);
  g.add_output(g.attention(q, k, v, std::nullopt, a));
  expect_vulkan_parity(g);
}

// Keys split over workgroups: attn_flash (prefill rows) merges the splits by a combine
// dispatch; attn_decode merges them in the kernel (the last split of each KV head to finish) and
// resets its tickets, so every later run of the same recording is right.
TEST(VulkanAttention, SplitKeysMergeAndEveryRunIsRight) {
  RLX_REQUIRE_VULKAN();
  auto dispatches = [](const AttnCase& c) { return rlx::testing::vulkan_dispatches(attention_case_graph(c, DType::F32)); };
  EXPECT_EQ(dispatches({AttnLayout::BSHD, MaskKind::Causal, 1, 1, 2048, 8, 2, 64}), 1u);   // decode: merged in the kernel
  EXPECT_EQ(dispatches({AttnLayout::BSHD, MaskKind::Causal, 1, 17, 1200, 2, 1, 128}), 2u); // 34 rows: kernel + combine
  EXPECT_EQ(dispatches({AttnLayout::BSHD, MaskKind::Causal, 1, 1, 100, 8, 2, 64}), 1u);    // too few keys to split
  EXPECT_EQ(dispatches({AttnLayout::BSHD, MaskKind::Causal, 64, 64, 300, 8, 8, 64}), 1u);  // enough workgroups
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    const AttnCase c{AttnLayout::BSHD, MaskKind::Causal, 2, 1, 1500, 8, 2, 64};  // GQA: 4 rows per KV head
    const Graph g = attention_case_graph(c, t);
    EXPECT_EQ(rlx::testing::vulkan_dispatches(g), 1u);
    auto cg = Session(Device::Vulkan).compile(g);
    auto ref = Session(Device::Cpu).compile(g);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const NamedTensors ins{{"q", random_tensor(t, {2, 1, 8, 64}, seed * 3)},
                             {"k", random_tensor(t, {2, 1500, 2, 64}, seed * 3 + 1)},
                             {"v", random_tensor(t, {2, 1500, 2, 64}, seed * 3 + 2)}};
      const std::vector<float> got = cg.run(ins)[0].to_f32(), want = ref.run(ins)[0].to_f32();
      ASSERT_EQ(got.size(), want.size());
      const double tol = t == DType::F32 ? 1e-4 : 2e-2;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "run " << seed << " at " << i;
    }
  }
}

TEST(VulkanAttention, F64ComputesInDouble) {
  RLX_REQUIRE_VULKAN();
  if (!vulkan::context().info.float64) GTEST_SKIP() << "the Vulkan device has no 64-bit floats";
  // f64 parity is 1e-9: exp and tanh in double (GLSL has none), the scale and softcap pushed
  // as doubles (score_scale 0.1 is not a float), every mask kind, prefill and split decode.
  const std::vector<AttnCase> cases = {
      {AttnLayout::BSHD, MaskKind::None, 2, 19, 19, 2, 2, 24, 0.1, 0},
      {AttnLayout::BHSD, MaskKind::Causal, 1, 1, 600, 4, 2, 64, 0, 7.5},  // split keys, softcap
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 30, 30, 2, 1, 16, 0, 0, 6},
      {AttnLayout::BSHD, MaskKind::Custom, 2, 7, 33, 2, 2, 40},
      {AttnLayout::BHSD, MaskKind::Bias, 2, 9, 9, 2, 2, 32, 0, 0.3},  // softcap 0.3: tanh of small scores
  };
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(rlx::testing::attention_case_name(c));
    ParityOptions o;
    o.lo = -3.0, o.hi = 3.0;  // scores over several units: exp's range reduction at work
    expect_vulkan_parity(attention_case_graph(c, DType::F64), Precision::Fp32, o);
  }
}

// The kernels the attention lowering emits for `g` on a device like NVIDIA's.
std::vector<vulkan::Kernel> lowered_attention(const Graph& g, Precision prec, bool coopmat, bool knob = true,
                                              bool bf16_matrices = false, bool khr_f16 = false) {
  SourceOnlyContext cx(prec, coopmat, knob);
  cx.dev.coopmat_bf16 = bf16_matrices;
  cx.dev.coopmat_khr_f16 = khr_f16;
  plan::Schedule s = plan::build_schedule(g);
  for (const plan::Step& st : s.steps)
    if (plan::step_family(st.op) == plan::StepFamily::Attention) vulkan::lower_attention(cx, st);
  return cx.kernels;
}

// Cases of the cooperative-matrix kernel: every mask kind, GQA (rows of a group over blocks),
// BHSD, partial row blocks, head dims 16..128, split keys (a long KV), softcap and a scale.
const std::vector<AttnCase>& coop_cases() {
  static const std::vector<AttnCase> cases = {
      {AttnLayout::BSHD, MaskKind::Causal, 2, 70, 70, 4, 2, 64},
      {AttnLayout::BHSD, MaskKind::None, 1, 33, 50, 2, 2, 128, 0.05, 15.0},
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 90, 90, 2, 1, 32, 0, 0, 7},
      {AttnLayout::BSHD, MaskKind::Custom, 2, 20, 45, 2, 2, 16},
      {AttnLayout::BHSD, MaskKind::Bias, 2, 24, 40, 2, 1, 80},
      {AttnLayout::BSHD, MaskKind::Causal, 1, 17, 1200, 2, 1, 128},  // 34 rows: splits of the keys
      {AttnLayout::BSHD, MaskKind::Causal, 1, 300, 260, 1, 1, 64},   // the first 40 rows see no key
  };
  return cases;
}

// lavapipe has no cooperative matrices: the kernel's GLSL is compiled here for every case in f16
// and in f32 under the Fp16 policy (16-byte word loads and element loads), and the choice is
// checked: not for bf16, f32 under Fp32, head dims that are not multiples of 16 or exceed 128,
// with the knob off, on devices without the extension, or for decode rows.
TEST(VulkanAttention, CoopmatKernelsCompile) {
  int compiled = 0;
  for (const AttnCase& c : coop_cases())
    for (DType t : {DType::F16, DType::F32}) {
      SCOPED_TRACE(rlx::testing::attention_case_name(c) + " " + dtype_name(t));
      const auto ks = lowered_attention(attention_case_graph(c, t), t == DType::F32 ? Precision::Fp16 : Precision::Fp32, true);
      ASSERT_FALSE(ks.empty());
      EXPECT_EQ(ks[0].name, "attention coopmat");
      EXPECT_EQ(vulkan::khr_rewrite_of(ks[0].source), vulkan::KhrRewrite::None);
      rlx::testing::expect_glsl_compiles(ks[0]);
      // The KHR form (devices listing KHR f16 matrices).
      const auto kk = lowered_attention(attention_case_graph(c, t), t == DType::F32 ? Precision::Fp16 : Precision::Fp32,
                                        true, true, false, true);
      ASSERT_FALSE(kk.empty());
      rlx::testing::expect_khr_rewrite(kk[0], vulkan::KhrRewrite::F16);
      ++compiled;
    }
  EXPECT_EQ(compiled, 14);
  const AttnCase base{AttnLayout::BSHD, MaskKind::Causal, 1, 40, 40, 2, 2, 64};
  auto first = [](const Graph& g, Precision p, bool coop, bool knob = true) { return lowered_attention(g, p, coop, knob).at(0).name; };
  EXPECT_EQ(first(attention_case_graph(base, DType::BF16), Precision::Fp32, true), "attention");  // no bf16 matrices
  EXPECT_EQ(first(attention_case_graph(base, DType::F32), Precision::Fp32, true), "attention");
  EXPECT_EQ(first(attention_case_graph(base, DType::F16), Precision::Fp32, false), "attention");
  EXPECT_EQ(first(attention_case_graph(base, DType::F16), Precision::Fp32, true, false), "attention");
  for (int64_t d : {int64_t{40}, int64_t{72}, int64_t{256}}) {
    AttnCase c = base;
    c.d = d;
    EXPECT_EQ(first(attention_case_graph(c, DType::F16), Precision::Fp32, true), "attention") << d;
  }
  AttnCase dec = base;
  dec.sq = 1, dec.skv = 700;
  EXPECT_EQ(first(attention_case_graph(dec, DType::F16), Precision::Fp32, true), "attention decode");
}

// The bf16 form (devices with KHR bf16 matrices): bf16 inputs and f32 under the Bf16 policy, every
// case's GLSL compiles and its SPIR-V takes the KHR rewrite (spirv_coopmat.h); f16 keeps the NV form.
TEST(VulkanAttention, CoopmatBf16KernelsCompile) {
  int compiled = 0;
  for (const AttnCase& c : coop_cases())
    for (DType t : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(rlx::testing::attention_case_name(c) + " " + dtype_name(t));
      const auto ks = lowered_attention(attention_case_graph(c, t), t == DType::F32 ? Precision::Bf16 : Precision::Fp32,
                                        true, true, true);
      ASSERT_FALSE(ks.empty());
      EXPECT_EQ(ks[0].name, "attention coopmat bf16");
      rlx::testing::expect_khr_rewrite(ks[0], vulkan::KhrRewrite::Bf16);
      ++compiled;
    }
  EXPECT_EQ(compiled, 14);
  const AttnCase base{AttnLayout::BSHD, MaskKind::Causal, 1, 40, 40, 2, 2, 64};
  const auto f16 = lowered_attention(attention_case_graph(base, DType::F16), Precision::Fp32, true, true, true).at(0);
  EXPECT_EQ(f16.name, "attention coopmat");
  EXPECT_EQ(vulkan::khr_rewrite_of(f16.source), vulkan::KhrRewrite::None);
  EXPECT_EQ(lowered_attention(attention_case_graph(base, DType::F32), Precision::Fp16, true, true, true).at(0).name,
            "attention coopmat");
}

// q, k and v sliced out of one fused projection (BERT): the attention reads the projection in
// place (plan_attention_narrows), so the slices are never copied; a slice that is also a graph
// output is still copied for it, and read in place by the attention all the same.
TEST(VulkanAttention, ReadsFusedProjectionSlicesInPlace) {
  RLX_REQUIRE_VULKAN();
  auto graph = [](DType t, int64_t b, int64_t s, bool k_out) {
    Graph g;
    const Value qkv = g.matmul(g.input("x", Shape::of({b, s, 96}, t)), g.param("w", Shape::of({96, 288}, t)));
    auto slice = [&](int64_t i) { return g.reshape(g.narrow(qkv, -1, 96 * i, 96), {b, s, 3, 32}); };
    const Value q = slice(0), k = slice(1), v = slice(2);
    ops::Attention a;
    a.num_heads = a.num_kv_heads = 3, a.head_dim = 32, a.mask_kind = MaskKind::Causal;
    g.add_output(g.attention(q, k, v, std::nullopt, a));
    if (k_out) g.add_output(k);
    return g;
  };
  EXPECT_EQ(rlx::testing::vulkan_dispatches(graph(DType::F32, 2, 37, false)), 2u);  // the product, the attention
  ParityOptions o;  // small projections: scores of a few units, softmax not saturated
  o.lo = -0.25, o.hi = 0.25;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (bool k_out : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (k_out ? " k also an output" : ""));
      expect_vulkan_parity(graph(t, 2, 37, k_out), Precision::Fp32, o);
      expect_vulkan_parity(graph(t, 1, 300, k_out), Precision::Fp32, o);
    }
}

// A decode step over a KV cache joined with its new rows (a static decoder graph): the decode
// kernel reads both parts where they are (plan_attention_concats) and the concats are not run;
// a joined K that is also a graph output is still joined for it. BSHD and BHSD, GQA, causal and
// no mask, split keys (700 cached rows), every float dtype.
TEST(VulkanAttention, DecodeReadsTheKvConcatInPlace) {
  RLX_REQUIRE_VULKAN();
  auto graph = [](DType t, AttnLayout layout, int64_t b, int64_t past, int64_t q_len, MaskKind mask, bool k_out) {
    Graph g;
    const bool bshd = layout == AttnLayout::BSHD;
    auto shape = [&](int64_t s, int64_t h) { return bshd ? Shape::of({b, s, h, 32}, t) : Shape::of({b, h, s, 32}, t); };
    const int64_t axis = bshd ? 1 : 2;
    const Value k = g.concat({g.param("k_cache", shape(past, 2)), g.input("k_new", shape(q_len, 2))}, axis);
    const Value v = g.concat({g.param("v_cache", shape(past, 2)), g.input("v_new", shape(q_len, 2))}, axis);
    ops::Attention a;
    a.num_heads = 8, a.num_kv_heads = 2, a.head_dim = 32, a.mask_kind = mask, a.layout = layout;
    g.add_output(g.attention(g.input("q", shape(q_len, 8)), k, v, std::nullopt, a));
    if (k_out) g.add_output(k);
    return g;
  };
  const uint64_t in_place = rlx::testing::vulkan_dispatches(graph(DType::F32, AttnLayout::BSHD, 2, 40, 1, MaskKind::Causal, false));
  EXPECT_EQ(in_place, 1u);  // the attention alone
  EXPECT_GT(rlx::testing::vulkan_dispatches(graph(DType::F32, AttnLayout::BSHD, 2, 40, 1, MaskKind::Causal, true)), in_place);
  struct Case {
    int64_t b, past, q_len;
  };
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (AttnLayout layout : {AttnLayout::BSHD, AttnLayout::BHSD})
      for (const Case& c : {Case{2, 40, 1}, Case{1, 700, 2}}) {
        const MaskKind mask = c.b == 2 && t == DType::F32 ? MaskKind::None : MaskKind::Causal;
        SCOPED_TRACE(std::string(dtype_name(t)) + (layout == AttnLayout::BSHD ? " bshd" : " bhsd") + " b" +
                     std::to_string(c.b) + " past " + std::to_string(c.past) + " q " + std::to_string(c.q_len));
        expect_vulkan_parity(graph(t, layout, c.b, c.past, c.q_len, mask, false));
        if (c.b == 2) expect_vulkan_parity(graph(t, layout, c.b, c.past, c.q_len, mask, true));
      }
}

// On devices with bf16 matrices (NVIDIA): bf16 attention, and f32 under the Bf16 policy, against the CPU.
TEST(VulkanAttention, CoopmatBf16Parity) {
  RLX_REQUIRE_VULKAN();
  if (!vulkan::context().info.coopmat_bf16)
    GTEST_SKIP() << "the Vulkan device has no bf16 cooperative matrices (VK_KHR_cooperative_matrix + "
                    "VK_KHR_shader_bfloat16; the kernels are compiled by CoopmatBf16KernelsCompile)";
  for (const AttnCase& c : coop_cases())
    for (DType t : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(rlx::testing::attention_case_name(c) + " " + dtype_name(t));
      ParityOptions o;  // f32 under the Bf16 policy: q, k, v and P rounded to bf16
      if (t == DType::F32) o.tolerance = [](DType) { return rlx::testing::parity_tolerance(DType::BF16); };
      expect_vulkan_parity(attention_case_graph(c, t), t == DType::F32 ? Precision::Bf16 : Precision::Fp32, o);
    }
}

TEST(VulkanAttention, CoopmatParity) {
  RLX_REQUIRE_VULKAN();
  if (!vulkan::context().info.coopmat_nv)
    GTEST_SKIP() << "the Vulkan device has no VK_NV_cooperative_matrix (the kernels are compiled by CoopmatKernelsCompile)";
  for (const AttnCase& c : coop_cases())
    for (DType t : {DType::F16, DType::F32}) {
      SCOPED_TRACE(rlx::testing::attention_case_name(c) + " " + dtype_name(t));
      ParityOptions o;  // f32 under the Fp16 policy: q, k, v and P rounded to f16
      if (t == DType::F32) o.tolerance = [](DType) { return rlx::testing::parity_tolerance(DType::F16); };
      expect_vulkan_parity(attention_case_graph(c, t), t == DType::F32 ? Precision::Fp16 : Precision::Fp32, o);
    }
  // Keep masks with NaN (kept) and a batch that keeps nothing (zeros).
  AttnCase c{AttnLayout::BSHD, MaskKind::Custom, 3, 40, 64, 2, 2, 64};
  c.mask_type = DType::F32;
  ParityOptions o;
  o.fixed_inputs = {{"mask", keep_mask(DType::F32, 3, 64)}};
  expect_vulkan_parity(attention_case_graph(c, DType::F16), Precision::Fp32, o);
}

TEST(VulkanAttention, RefusesWhatItDoesNotCompute) {
  RLX_REQUIRE_VULKAN();
  const vulkan::DeviceInfo& info = vulkan::context().info;
  std::string why;
  const Graph wide = attention_case_graph({AttnLayout::BSHD, MaskKind::None, 1, 4, 4, 1, 1, 320}, DType::F32);
  EXPECT_FALSE(vulkan::vulkan_claims_node(wide, attention_node(wide), nullptr, &why));
  EXPECT_NE(why.find("head_dim <= 256"), std::string::npos) << why;
  const Graph ok = attention_case_graph({AttnLayout::BHSD, MaskKind::Bias, 1, 4, 4, 2, 1, 256}, DType::BF16);
  EXPECT_TRUE(vulkan::vulkan_claims_node(ok, attention_node(ok), &info, &why)) << why;
  // f64 at head_dim 256: the prefill kernel's smallest tiles (8 rows, 16 keys, V over K, rows
  // padded by 4 doubles) take 52228 bytes of shared memory; refused with the reason on smaller
  // devices.
  const Graph f64 = attention_case_graph({AttnLayout::BSHD, MaskKind::None, 1, 4, 4, 1, 1, 256}, DType::F64);
  const bool fits = info.max_shared_bytes >= 52228;
  EXPECT_EQ(vulkan::vulkan_claims_node(f64, attention_node(f64), &info, &why), fits && info.float64) << why;
  if (!fits && info.float64) {
    EXPECT_NE(why.find("shared memory"), std::string::npos) << why;
  }
}

TEST(VulkanAttention, FusedAttentionBlockIsDecomposedIntoAttention) {
  RLX_REQUIRE_VULKAN();
  Graph g;
  const int64_t b = 2, s = 6, heads = 2, hd = 8, e = heads * hd;
  ops::FusedAttentionBlock f{.num_heads = heads, .head_dim = hd};
  const Value hidden = g.input("hidden", Shape::of({b, s, e}));
  const Value out = g.apply(f, {hidden, g.param("qkv_w", Shape::of({e, 3 * e})), g.param("out_w", Shape::of({e, e})),
                                    g.input("mask", Shape::of({b, s}, DType::Bool)), g.param("qkv_b", Shape::of({3 * e})),
                                    g.param("out_b", Shape::of({e}))});
  g.add_output(out);
  auto claims = [](const Graph& gg, const Node& n) { return vulkan::vulkan_claims_node(gg, n, &vulkan::context().info); };
  EXPECT_FALSE(claims(g, g.node(out.node)));
  const Graph x = passes::expand_unclaimed(g, claims);
  int attentions = 0;
  bool all_claimed = true;
  for (const Node& n : x.nodes()) {
    EXPECT_NE(op_name(n.op), std::string("fused_attention_block"));
    if (std::holds_alternative<ops::Attention>(n.op)) {
      ++attentions;
      EXPECT_TRUE(claims(x, n));
    }
    all_claimed = all_claimed && claims(x, n);
  }
  EXPECT_EQ(attentions, 1);
  // The whole block on the device once the other families (matmul, narrow, reshape) run there.
  if (all_claimed) expect_vulkan_parity(g);
  else std::cout << "[ vulkan   ] the decomposed block has nodes other families do not claim yet: parity not run\n";
}

TEST(VulkanAttention, FusedTransformerLayerIsDecomposedIntoAttention) {
  RLX_REQUIRE_VULKAN();
  Graph g;
  const int64_t b = 1, s = 5, heads = 2, hd = 4, e = heads * hd, f = 16;
  auto p = [&](const char* name, std::vector<int64_t> dims) { return g.param(name, Shape::from(dims, DType::F32)); };
  const Value hidden = g.input("hidden", Shape::of({b, s, e}));
  const Value out = g.apply(ops::FusedTransformerLayer{.num_heads = heads, .head_dim = hd},
                            {hidden, p("qkv_w", {e, 3 * e}), p("qkv_b", {3 * e}), p("out_w", {e, e}), p("out_b", {e}),
                             p("ln1_g", {e}), p("ln1_b", {e}), p("fc1_w", {e, f}), p("fc1_b", {f}), p("fc2_w", {f, e}),
                             p("fc2_b", {e}), p("ln2_g", {e}), p("ln2_b", {e}),
                             g.input("mask", Shape::of({b, s}, DType::Bool))});
  g.add_output(out);
  auto claims = [](const Graph& gg, const Node& n) { return vulkan::vulkan_claims_node(gg, n, &vulkan::context().info); };
  EXPECT_FALSE(claims(g, g.node(out.node)));
  const Graph x = passes::expand_unclaimed(g, claims);
  int attentions = 0;
  for (const Node& n : x.nodes()) {
    EXPECT_NE(op_name(n.op), std::string("fused_transformer_layer"));
    if (std::holds_alternative<ops::Attention>(n.op)) {
      ++attentions;
      EXPECT_TRUE(claims(x, n));
    }
  }
  EXPECT_EQ(attentions, 1);
}

#endif

}  // namespace
