// The absorption plans of plan/absorb_plans.h on hand-built graphs, CPU only: which producer
// steps a consumer takes (GEMV prologues, the decode attention's KV concats and RoPEs, RoPE
// pairs) and the near misses that keep the producer: another consumer, a graph output, a step
// in between writing over the producer's inputs, a shape the plan does not take.
#include <optional>
#include <string>

#include "plan/absorb_plans.h"
#include "plan/plan_test_util.h"

namespace rlx {
namespace {

// The index of the (first) step of op kind `name`.
size_t step_of(const plan::Schedule& s, const std::string& name) {
  for (size_t i = 0; i < s.steps.size(); ++i)
    if (op_name(s.steps[i].op) == name) return i;
  ADD_FAILURE() << "no " << name << " step";
  return SIZE_MAX;
}

// A GEMV kernel taking skinny products of up to 4 rows.
int64_t gemv4(const plan::Step& st) {
  const int64_t r = plan::skinny_rows(st);
  return r <= 4 ? r : 0;
}

std::map<size_t, size_t> gemv_plan(const Graph& g) { return plan::plan_gemv_prologues(plan::build_schedule(g), gemv4); }

// ---- AbsorbIndex ---------------------------------------------------------------------------

TEST(AbsorbIndex, SoleProducerNeedsOneUseBeforeTheConsumer) {
  Graph g;
  const Value x = g.input("x", Shape::of({4}));
  const Value a = g.relu(x);           // used once
  const Value b = g.exp(x);            // used twice
  const Value c = g.add(a, b);
  const Value d = g.mul(b, c);
  const Value e = g.sigmoid(d);        // a graph output, used again
  g.add_output(g.tanh(e));
  g.add_output(e);
  const plan::Schedule s = plan::build_schedule(g, plantest::no_reuse());
  const plan::AbsorbIndex index(s);
  const size_t sa = step_of(s, "activation"), sc = step_of(s, "binary");
  EXPECT_EQ(index.sole_producer(s.steps[sc].in[0], sc), std::optional<size_t>(sa));
  EXPECT_EQ(index.sole_producer(s.steps[sc].in[1], sc), std::nullopt);  // b: two uses
  const size_t last = s.steps.size() - 1;  // tanh(e)
  EXPECT_EQ(index.sole_producer(s.steps[last].in[0], last), std::nullopt);  // e: also a graph output
  EXPECT_EQ(index.sole_producer(s.steps[sc].in[0], sa), std::nullopt);      // not before the consumer
  EXPECT_EQ(index.sole_producer(s.steps[sa].in[0], sa), std::nullopt);      // x: a leaf, no step
}

TEST(AbsorbIndex, ArenaOverlapIgnoresLeavesAndEmptyValues) {
  plan::TensorRef a, b;
  a.loc.kind = b.loc.kind = plan::Location::Kind::Arena;
  a.loc.offset = 0, a.loc.bytes = 64;
  b.loc.offset = 32, b.loc.bytes = 64;
  EXPECT_TRUE(plan::arena_overlap(a, b));
  b.loc.offset = 64;  // adjacent
  EXPECT_FALSE(plan::arena_overlap(a, b));
  b.loc.offset = 0, b.loc.bytes = 0;  // empty
  EXPECT_FALSE(plan::arena_overlap(a, b));
  b.loc.bytes = 64, b.loc.kind = plan::Location::Kind::Leaf;
  EXPECT_FALSE(plan::arena_overlap(a, b));
}

// ---- GEMV prologues ------------------------------------------------------------------------

struct NormGemv {
  Graph g;
  Value norm, mm;
};
// A computed x of `rows` rows of 64, its RmsNorm and the product with a [64, 32] weight.
NormGemv norm_gemv(int64_t rows) {
  NormGemv n;
  const Value x = n.g.input("x", Shape::of({rows, 64}));
  n.norm = n.g.rms_norm(x, n.g.param("gamma", Shape::of({64})), std::nullopt, 1e-5);
  n.mm = n.g.matmul(n.norm, n.g.param("w", Shape::of({64, 32})));
  return n;
}

TEST(GemvProloguePlan, AbsorbsRmsNormAndSwiGLU) {
  {
    NormGemv n = norm_gemv(3);
    n.g.add_output(n.mm);
    const plan::Schedule s = plan::build_schedule(n.g);
    const auto p = plan::plan_gemv_prologues(s, gemv4);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p.begin()->first, step_of(s, "matmul"));
    EXPECT_EQ(p.begin()->second, step_of(s, "rms_norm"));
  }
  {  // batched rows collapse onto A's rows: 2 x 1 rows
    Graph g;
    const Value u = g.input("u", Shape::of({2, 1, 128}, DType::BF16));
    const Value h = g.apply(ops::FusedSwiGLU{true}, {u});
    g.add_output(g.matmul(h, g.param("w", Shape::of({64, 16}, DType::BF16))));
    const plan::Schedule s = plan::build_schedule(g);
    const auto p = plan::plan_gemv_prologues(s, gemv4);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p.begin()->second, step_of(s, "fused_swiglu"));
  }
}

// A decoder MLP: rms_norm(h) -> gate|up product -> FusedSwiGLU -> down product + h. The memory
// plan keeps the SwiGLU's input alive until the down product of a few rows (kGemvPrologueRows),
// which would otherwise take its freed slot, so the GEMV can compute the SwiGLU in its prologue;
// with more rows the slot is reused as before.
TEST(GemvProloguePlan, TheMemoryPlanKeepsAProloguesInputsForSkinnyProducts) {
  auto mlp = [](int64_t rows) {
    Graph g;
    const Value h = g.relu(g.input("x", Shape::of({rows, 64})));
    const Value n = g.rms_norm(h, g.param("gamma", Shape::of({64})), std::nullopt, 1e-5);
    const Value gu = g.matmul(n, g.param("wgu", Shape::of({64, 512})));
    const Value sw = g.apply(ops::FusedSwiGLU{false}, {gu});
    g.add_output(g.add(g.matmul(sw, g.param("wd", Shape::of({256, 64}))), h));
    return g;
  };
  auto any_rows = [](const plan::Step& st) { return plan::skinny_rows(st); };
  {
    const Graph g = mlp(1);
    const plan::Schedule s = plan::build_schedule(g);
    EXPECT_EQ(plantest::overlap_violation(g, plan::plan_memory(g)), "");
    const auto p = plan::plan_gemv_prologues(s, any_rows);
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p.rbegin()->second, step_of(s, "fused_swiglu"));
    EXPECT_EQ(p.begin()->second, step_of(s, "rms_norm"));
  }
  {  // more rows than a GEMV prologue takes: the down product reuses the gate|up product's bytes
    const Graph g = mlp(plan::kGemvPrologueRows + 8);
    const plan::Schedule s = plan::build_schedule(g);
    EXPECT_EQ(plantest::overlap_violation(g, plan::plan_memory(g)), "");
    const size_t sw = step_of(s, "fused_swiglu");
    EXPECT_TRUE(plan::arena_overlap(s.steps[sw].in.at(0), s.steps[sw + 1].out.at(0)));
    const auto p = plan::plan_gemv_prologues(s, any_rows);
    EXPECT_EQ(p.count(sw + 1), 0u);
  }
}

TEST(GemvProloguePlan, NearMissesKeepTheProducer) {
  {  // the norm is also a graph output
    NormGemv n = norm_gemv(2);
    n.g.add_output(n.mm);
    n.g.add_output(n.norm);
    EXPECT_TRUE(gemv_plan(n.g).empty());
  }
  {  // the norm feeds two products
    NormGemv n = norm_gemv(2);
    n.g.add_output(n.mm);
    n.g.add_output(n.g.matmul(n.norm, n.g.param("w2", Shape::of({64, 8}))));
    EXPECT_TRUE(gemv_plan(n.g).empty());
  }
  {  // five rows: the backend's GEMV does not take the product
    NormGemv n = norm_gemv(5);
    n.g.add_output(n.mm);
    EXPECT_TRUE(gemv_plan(n.g).empty());
    EXPECT_EQ(plan::plan_gemv_prologues(plan::build_schedule(n.g), plan::skinny_rows).size(), 1u);  // one that does
  }
  {  // a norm over a shorter row than the product's K (reshaped in between) is not A's prologue
    Graph g;
    const Value x = g.input("x", Shape::of({1, 2, 32}));
    const Value nrm = g.rms_norm(x, g.param("gamma", Shape::of({32})));
    g.add_output(g.matmul(g.reshape(nrm, {1, 64}), g.param("w", Shape::of({64, 8}))));
    EXPECT_TRUE(gemv_plan(g).empty());
  }
  {  // a LayerNorm is no prologue
    Graph g;
    const Value x = g.input("x", Shape::of({1, 64}));
    const Value nrm = g.layer_norm(x, g.param("gamma", Shape::of({64})), std::nullopt);
    g.add_output(g.matmul(nrm, g.param("w", Shape::of({64, 8}))));
    EXPECT_TRUE(gemv_plan(g).empty());
  }
}

// The norm's input is computed (in the arena) and dies at the norm, so the memory plan may give
// its bytes to a later value: the product's own result, or a step in between. Either would
// overwrite what the product reads in its prologue: the norm runs. (The plan keeps the input
// alive for products of at most kGemvPrologueRows rows: these have more, for a GEMV that takes
// any skinny product.)
TEST(GemvProloguePlan, OverwrittenInputsKeepTheProducer) {
  constexpr int64_t kRows = plan::kGemvPrologueRows + 8;
  auto graph = [](bool in_between) {
    Graph g;
    const Value x = g.add(g.input("a", Shape::of({kRows, 64})), g.input("b", Shape::of({kRows, 64})));
    const Value nrm = g.rms_norm(x, g.param("gamma", Shape::of({64})));
    if (in_between) g.add_output(g.mul(g.input("c", Shape::of({kRows, 64})), g.input("d", Shape::of({kRows, 64}))));
    g.add_output(g.matmul(nrm, g.param("w", Shape::of({64, 8}))));
    return g;
  };
  {  // the product's result over the norm's input
    const plan::Schedule s = plan::build_schedule(graph(false));
    const size_t norm = step_of(s, "rms_norm"), mm = step_of(s, "matmul");
    ASSERT_TRUE(plan::arena_overlap(s.steps[mm].out.at(0), s.steps[norm].in.at(0)))
        << "the memory plan changed; this test no longer covers the product's result over the input";
    EXPECT_TRUE(plan::plan_gemv_prologues(s, plan::skinny_rows).empty());
    const plan::AbsorbIndex index(s);
    EXPECT_TRUE(index.inputs_survive(norm, mm, {}, false));  // only the result writes there
  }
  {  // a step in between over the norm's input
    const plan::Schedule s = plan::build_schedule(graph(true));
    const size_t norm = step_of(s, "rms_norm"), mm = step_of(s, "matmul");
    ASSERT_EQ(mm, norm + 2);
    ASSERT_TRUE(plan::arena_overlap(s.steps[norm + 1].out.at(0), s.steps[norm].in.at(0)))
        << "the memory plan changed; this test no longer covers an overwritten input";
    EXPECT_TRUE(plan::plan_gemv_prologues(s, plan::skinny_rows).empty());
    const plan::AbsorbIndex index(s);
    EXPECT_FALSE(index.inputs_survive(norm, mm, {}, false));
    EXPECT_TRUE(index.inputs_survive(norm, mm, {norm + 1}, false));  // unless that step is not run
  }
  // Without reuse nothing is overwritten.
  for (bool in_between : {false, true})
    EXPECT_EQ(plan::plan_gemv_prologues(plan::build_schedule(graph(in_between), plantest::no_reuse()), plan::skinny_rows).size(),
              1u);
}

TEST(GemvProloguePlan, SkinnyRows) {
  auto rows = [](const Shape& a, const Shape& b) {
    Graph g;
    g.add_output(g.matmul(g.input("a", a), g.param("b", b)));
    const plan::Schedule s = plan::build_schedule(g);
    return plan::skinny_rows(s.steps.at(0));
  };
  EXPECT_EQ(rows(Shape::of({3, 64}), Shape::of({64, 32})), 3);
  EXPECT_EQ(rows(Shape::of({2, 3, 64}), Shape::of({64, 32})), 6);  // shared weight: batch onto rows
  EXPECT_EQ(rows(Shape::of({2, 3, 64}), Shape::of({2, 64, 32})), 0);  // a weight per batch item
  EXPECT_EQ(rows(Shape::of({3, 0}), Shape::of({0, 32})), 0);           // k = 0
  Graph g;
  g.add_output(g.relu(g.input("x", Shape::of({4}))));
  EXPECT_EQ(plan::skinny_rows(plan::build_schedule(g).steps.at(0)), 0);  // not a product
}

// ---- the decode attention's KV concats and RoPEs -------------------------------------------

constexpr plan::DecodeAttentionLimits kLimits{8, 8};

struct Decode {
  Graph g;
  Value q, k, v, out;
  Value cos, sin;
};

ops::Attention gqa(AttnLayout layout) {
  ops::Attention a;
  a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 16, a.mask_kind = MaskKind::Causal, a.layout = layout;
  return a;
}

// One decode step: q_len query rows over a cache of 5 rows plus q_len new ones, GQA 4/2; with
// `rope`, q and the new K rows rotated by one pair of tables (BSHD only).
Decode decode(AttnLayout layout = AttnLayout::BSHD, int64_t q_len = 1, bool rope = false) {
  Decode d;
  const bool bshd = layout == AttnLayout::BSHD;
  auto shape = [&](int64_t s, int64_t h) { return bshd ? Shape::of({1, s, h, 16}) : Shape::of({1, h, s, 16}); };
  const int64_t axis = bshd ? 1 : 2;
  d.q = d.g.input("q", shape(q_len, 4));
  Value k_new = d.g.input("k_new", shape(q_len, 2));
  if (rope) {
    d.cos = d.g.input("cos", Shape::of({q_len, 8}));
    d.sin = d.g.input("sin", Shape::of({q_len, 8}));
    d.q = d.g.rope(d.q, d.cos, d.sin, 16, 16);
    k_new = d.g.rope(k_new, d.cos, d.sin, 16, 16);
  }
  d.k = d.g.concat({d.g.param("k_cache", shape(5, 2)), k_new}, axis);
  d.v = d.g.concat({d.g.param("v_cache", shape(5, 2)), d.g.input("v_new", shape(q_len, 2))}, axis);
  d.out = d.g.attention(d.q, d.k, d.v, std::nullopt, gqa(layout));
  return d;
}

size_t absorbed(const std::map<size_t, std::vector<size_t>>& plan) {
  size_t n = 0;
  for (const auto& [consumer, producers] : plan) n += producers.size();
  return n;
}
size_t concats_taken(const Graph& g, const plan::DecodeAttentionLimits& limits = kLimits) {
  return absorbed(plan::plan_attention_concats(plan::build_schedule(g), limits));
}

TEST(AttentionConcatPlan, TakesTheCacheConcatsOfDecode) {
  for (AttnLayout layout : {AttnLayout::BSHD, AttnLayout::BHSD}) {
    Decode d = decode(layout);
    d.g.add_output(d.out);
    const plan::Schedule s = plan::build_schedule(d.g);
    const auto p = plan::plan_attention_concats(s, kLimits);
    ASSERT_EQ(p.size(), 1u) << enum_name(layout);
    EXPECT_EQ(p.begin()->first, step_of(s, "attention"));
    EXPECT_EQ(p.begin()->second.size(), 2u);
  }
}

TEST(AttentionConcatPlan, DecodeShapedByTheLimits) {
  Decode d = decode(AttnLayout::BSHD, 2);  // 2 query rows x group 2 = 4 rows per KV head
  d.g.add_output(d.out);
  EXPECT_EQ(concats_taken(d.g), 2u);
  EXPECT_EQ(concats_taken(d.g, {4, 8}), 2u);
  EXPECT_EQ(concats_taken(d.g, {3, 8}), 0u);  // prefill-shaped for a kernel of at most 3 rows
}

TEST(AttentionConcatPlan, NearMissesKeepTheConcat) {
  {  // the joined K is also a graph output: only V is read in place
    Decode d = decode();
    d.g.add_output(d.out);
    d.g.add_output(d.k);
    EXPECT_EQ(concats_taken(d.g), 1u);
  }
  {  // the joined V feeds another op too
    Decode d = decode();
    d.g.add_output(d.out);
    d.g.add_output(d.g.relu(d.v));
    EXPECT_EQ(concats_taken(d.g), 1u);
  }
  {  // three parts, or a join along the heads instead of the sequence
    Graph g;
    const Value q = g.input("q", Shape::of({1, 1, 4, 16}));
    auto part = [&](const char* name, int64_t s, int64_t h) { return g.input(name, Shape::of({1, s, h, 16})); };
    const Value k = g.concat({part("k0", 3, 2), part("k1", 2, 2), part("k2", 1, 2)}, 1);
    const Value v = g.concat({part("v0", 6, 1), part("v1", 6, 1)}, 2);
    g.add_output(g.attention(q, k, v, std::nullopt, gqa(AttnLayout::BSHD)));
    EXPECT_EQ(concats_taken(g), 0u);
  }
}

// The new K rows are computed and die at their concat; a step between the concat and the
// attention takes their bytes: that concat runs (its parts are gone when the attention reads).
TEST(AttentionConcatPlan, AStepInBetweenOverwritingThePartsKeepsTheConcat) {
  Graph g;
  auto shape = [](int64_t s) { return Shape::of({1, s, 2, 16}); };
  const Value k_new = g.add(g.input("a", shape(1)), g.input("b", shape(1)));
  const Value k = g.concat({g.param("k_cache", shape(5)), k_new}, 1);
  g.add_output(g.mul(g.input("c", shape(1)), g.input("d", shape(1))));  // between the concat and the attention
  const Value v = g.concat({g.param("v_cache", shape(5)), g.input("v_new", shape(1))}, 1);
  g.add_output(g.attention(g.input("q", Shape::of({1, 1, 4, 16})), k, v, std::nullopt, gqa(AttnLayout::BSHD)));
  const plan::Schedule s = plan::build_schedule(g);
  const size_t kc = step_of(s, "concat");
  ASSERT_TRUE(plan::arena_overlap(s.steps[kc + 1].out.at(0), s.steps[kc].in.at(1)))
      << "the memory plan changed; this test no longer covers an overwritten part";
  const auto p = plan::plan_attention_concats(s, kLimits);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p.begin()->second, std::vector<size_t>{step_of(s, "attention") - 1});  // only V's concat
  EXPECT_EQ(concats_taken(g), 1u);
  const plan::Schedule all = plan::build_schedule(g, plantest::no_reuse());
  EXPECT_EQ(absorbed(plan::plan_attention_concats(all, kLimits)), 2u);
}

// A BERT-style attention: q, k and v sliced along the last axis out of one fused [b, s, 3e]
// projection and reshaped to [b, s, h, d] (BSHD), 4 heads of 16.
struct FusedQkv {
  Graph g;
  Value qkv, q, k, v;
};
FusedQkv fused_qkv(int64_t b = 2, int64_t s = 5) {
  FusedQkv f;
  f.qkv = f.g.matmul(f.g.input("x", Shape::of({b, s, 64})), f.g.param("w", Shape::of({64, 192})));
  auto slice = [&](int64_t i) { return f.g.reshape(f.g.narrow(f.qkv, -1, 64 * i, 64), {b, s, 4, 16}); };
  f.q = slice(0), f.k = slice(1), f.v = slice(2);
  return f;
}
ops::Attention bshd_attention() {
  ops::Attention a;
  a.num_heads = a.num_kv_heads = 4, a.head_dim = 16, a.mask_kind = MaskKind::None;
  return a;
}
size_t narrows_taken(const Graph& g) {
  size_t n = 0;
  for (const auto& [consumer, slices] : plan::plan_attention_narrows(plan::build_schedule(g))) n += slices.size();
  return n;
}

TEST(AttentionNarrowPlan, ReadsTheSlicesOfAFusedProjection) {
  FusedQkv f = fused_qkv();
  f.g.add_output(f.g.attention(f.q, f.k, f.v, std::nullopt, bshd_attention()));
  const plan::Schedule s = plan::build_schedule(f.g);
  const auto p = plan::plan_attention_narrows(s);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p.begin()->first, step_of(s, "attention"));
  ASSERT_EQ(p.begin()->second.size(), 3u);
  for (const plan::AttentionNarrow& an : p.begin()->second) {
    EXPECT_EQ(std::string(op_name(s.steps[an.step].op)), "narrow");
    EXPECT_EQ(an.start, 64 * static_cast<int64_t>(an.port));
    EXPECT_EQ(an.width, 192);
    EXPECT_EQ(an.source.value, s.steps[step_of(s, "matmul")].out.at(0).value);
  }
}

TEST(AttentionNarrowPlan, NearMissesKeepTheNarrow) {
  {  // k is also a graph output: q and v are read in place
    FusedQkv f = fused_qkv();
    f.g.add_output(f.g.attention(f.q, f.k, f.v, std::nullopt, bshd_attention()));
    f.g.add_output(f.k);
    EXPECT_EQ(narrows_taken(f.g), 2u);
  }
  {  // BHSD: the slices would be [b, s, h, d] rows, not what the layout reads
    FusedQkv f = fused_qkv(2, 4);
    ops::Attention a = bshd_attention();
    a.layout = AttnLayout::BHSD;
    f.g.add_output(f.g.attention(f.q, f.k, f.v, std::nullopt, a));
    EXPECT_EQ(narrows_taken(f.g), 0u);
  }
  {  // a slice along the sequence, and a transposed (not reshaped) slice
    Graph g;
    const Value x = g.input("x", Shape::of({1, 10, 4, 16}));
    const Value q = g.narrow(x, 1, 0, 5);
    const Value t = g.narrow(g.input("y", Shape::of({1, 4, 5, 48})), -1, 16, 16);
    const Value k = g.transpose(t, {0, 2, 1, 3});
    g.add_output(g.attention(q, k, g.input("v", Shape::of({1, 5, 4, 16})), std::nullopt, bshd_attention()));
    EXPECT_EQ(narrows_taken(g), 0u);
  }
  {  // another dtype: the slice is cast before the attention
    FusedQkv f = fused_qkv();
    const Value q = f.g.cast(f.q, DType::F16), k = f.g.cast(f.k, DType::F16), v = f.g.cast(f.v, DType::F16);
    f.g.add_output(f.g.attention(q, k, v, std::nullopt, bshd_attention()));
    EXPECT_EQ(narrows_taken(f.g), 0u);
  }
}

size_t ropes_taken(const Graph& g, const plan::DecodeAttentionLimits& limits = kLimits) {
  const plan::Schedule s = plan::build_schedule(g);
  return absorbed(plan::plan_attention_ropes(s, plan::plan_attention_concats(s, limits), limits));
}

TEST(AttentionRopePlan, TakesTheRopesOfQAndTheNewKRows) {
  Decode d = decode(AttnLayout::BSHD, 1, true);
  d.g.add_output(d.out);
  const plan::Schedule s = plan::build_schedule(d.g);
  const auto ropes = plan::plan_attention_ropes(s, plan::plan_attention_concats(s, kLimits), kLimits);
  ASSERT_EQ(ropes.size(), 1u);
  EXPECT_EQ(ropes.begin()->first, step_of(s, "attention"));
  ASSERT_EQ(ropes.begin()->second.size(), 2u);
  for (size_t r : ropes.begin()->second) EXPECT_TRUE(std::holds_alternative<ops::Rope>(s.steps[r].op));
  // Without the K concat planned, only q's RoPE.
  EXPECT_EQ(absorbed(plan::plan_attention_ropes(s, {}, kLimits)), 1u);
}

TEST(AttentionRopePlan, NearMissesKeepTheRope) {
  {  // more new K rows than the kernel rotates: only q's
    Decode d = decode(AttnLayout::BSHD, 2, true);
    d.g.add_output(d.out);
    EXPECT_EQ(ropes_taken(d.g), 2u);
    EXPECT_EQ(ropes_taken(d.g, {8, 1}), 1u);
  }
  {  // q's rotated value is also a graph output: only K's
    Decode d = decode(AttnLayout::BSHD, 1, true);
    d.g.add_output(d.out);
    d.g.add_output(d.q);
    EXPECT_EQ(ropes_taken(d.g), 1u);
  }
  {  // the new K rows rotated by other tables than q: only q's
    Decode d;
    auto shape = [](int64_t s, int64_t h) { return Shape::of({1, s, h, 16}); };
    const Value c1 = d.g.input("c1", Shape::of({1, 8})), s1 = d.g.input("s1", Shape::of({1, 8}));
    const Value c2 = d.g.input("c2", Shape::of({1, 8}));
    const Value q = d.g.rope(d.g.input("q", shape(1, 4)), c1, s1, 16, 16);
    const Value k = d.g.concat({d.g.param("kc", shape(5, 2)), d.g.rope(d.g.input("kn", shape(1, 2)), c2, s1, 16, 16)}, 1);
    const Value v = d.g.concat({d.g.param("vc", shape(5, 2)), d.g.input("vn", shape(1, 2))}, 1);
    d.g.add_output(d.g.attention(q, k, v, std::nullopt, gqa(AttnLayout::BSHD)));
    EXPECT_EQ(ropes_taken(d.g), 1u);
  }
}

// ---- RoPE pairs ----------------------------------------------------------------------------

size_t pairs(const Graph& g) { return plan::plan_rope_pairs(plan::build_schedule(g)).size(); }

TEST(RopePairPlan, PairsConsecutiveRopesOfOneRotation) {
  const Shape tab = Shape::of({3, 8});
  {  // the same tables: one pair, the second step takes the first
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab);
    h.add_output(h.rope(h.input("q", Shape::of({1, 3, 4, 16})), c, sn, 16, 16));
    h.add_output(h.rope(h.input("k", Shape::of({1, 3, 2, 16})), c, sn, 16, 16));
    const auto p = plan::plan_rope_pairs(plan::build_schedule(h));
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p.begin()->first, p.begin()->second + 1);
  }
  {  // three in a row: a step is in one pair at most
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab);
    for (const char* name : {"a", "b", "c3"}) h.add_output(h.rope(h.input(name, Shape::of({1, 3, 2, 16})), c, sn, 16, 16));
    EXPECT_EQ(pairs(h), 1u);
  }
  {  // different tables
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab), c2 = h.input("c2", tab);
    h.add_output(h.rope(h.input("q", Shape::of({1, 3, 4, 16})), c, sn, 16, 16));
    h.add_output(h.rope(h.input("k", Shape::of({1, 3, 2, 16})), c2, sn, 16, 16));
    EXPECT_EQ(pairs(h), 0u);
  }
  {  // the second rotates the first's result
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab);
    h.add_output(h.rope(h.rope(h.input("q", Shape::of({1, 3, 4, 16})), c, sn, 16, 16), c, sn, 16, 16));
    EXPECT_EQ(pairs(h), 0u);
  }
  {  // a step between them (k's projection, as a decoder schedules it): still a pair
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab);
    h.add_output(h.rope(h.input("q", Shape::of({1, 3, 4, 16})), c, sn, 16, 16));
    const Value k = h.mul(h.input("k", Shape::of({1, 3, 2, 16})), h.input("kscale", Shape::of({1, 3, 2, 16})));
    h.add_output(h.rope(k, c, sn, 16, 16));
    const plan::Schedule sched = plan::build_schedule(h);
    const auto p = plan::plan_rope_pairs(sched);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(std::holds_alternative<ops::Rope>(sched.steps[p.begin()->second].op));
    EXPECT_GT(p.begin()->first, p.begin()->second + 1);
  }
  {  // a step between them reads the first's result: no pair
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab);
    const Value q = h.rope(h.input("q", Shape::of({1, 3, 4, 16})), c, sn, 16, 16);
    const Value k = h.mul(h.input("k", Shape::of({1, 3, 2, 16})), h.sum(q, {2, 3}, true));
    h.add_output(h.rope(k, c, sn, 16, 16));
    h.add_output(q);
    EXPECT_EQ(pairs(h), 0u);
  }
  {  // another style
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab);
    h.add_output(h.rope(h.input("q", Shape::of({1, 3, 4, 16})), c, sn, 16, 16));
    h.add_output(h.rope(h.input("k", Shape::of({1, 3, 2, 16})), c, sn, 16, 16, RopeStyle::GptJ));
    EXPECT_EQ(pairs(h), 0u);
  }
}

// ---- CacheWrite pairs ----------------------------------------------------------------------

TEST(CacheWritePairPlan, PairsTheKAndVWritesOfOnePositionVector) {
  auto build = [](bool other_positions, bool read_between, bool other_shape) {
    Graph g;
    const Value pos = g.input("pos", Shape::of({1}, DType::I64));
    const Value pos2 = g.input("pos2", Shape::of({1}, DType::I64));
    const Value kc = g.input("kc", Shape::of({1, 16, 2, 8}));
    const Value vc = g.input("vc", Shape::of({1, other_shape ? 32 : 16, 2, 8}));
    const Value k = g.relu(g.input("k", Shape::of({1, 1, 2, 8})));
    const Value v = g.relu(g.input("v", Shape::of({1, 1, 2, 8})));
    const Value ku = g.cache_write(kc, k, pos);
    if (read_between) g.add_output(g.exp(ku));
    const Value vu = g.cache_write(vc, v, other_positions ? pos2 : pos);
    g.add_output(ku);
    g.add_output(vu);
    plan::PlanOptions o;  // the caches written in place, as the GPU backends plan them
    o.write_inputs = true;
    return plan::build_schedule(g, o);
  };
  {
    const plan::Schedule s = build(false, false, false);
    const auto p = plan::plan_cache_write_pairs(s);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p.begin()->second, step_of(s, "cache_write"));
    EXPECT_EQ(std::string(op_name(s.steps[p.begin()->first].op)), "cache_write");
    EXPECT_GT(p.begin()->first, p.begin()->second);
  }
  EXPECT_TRUE(plan::plan_cache_write_pairs(build(true, false, false)).empty());  // other positions
  EXPECT_TRUE(plan::plan_cache_write_pairs(build(false, true, false)).empty());  // the k cache read between
  EXPECT_TRUE(plan::plan_cache_write_pairs(build(false, false, true)).empty());  // another cache length
}

// ---- CacheWrite RoPEs ----------------------------------------------------------------------

// k = rope(relu(kin)) written into the k cache, v = relu(vin) into the v cache at the same
// positions; `v_after`: v is computed after the k write (so it may take the bytes of k's dead
// input), `k_out`: the rotated keys are also a graph output, `k_read`: something else reads them.
plan::Schedule rope_cache_schedule(bool v_after, bool k_out, bool k_read) {
  Graph g;
  const Value pos = g.input("pos", Shape::of({1}, DType::I64));
  const Value c = g.input("c", Shape::of({1, 4})), sn = g.input("s", Shape::of({1, 4}));
  const Value kc = g.input("kc", Shape::of({1, 16, 2, 8})), vc = g.input("vc", Shape::of({1, 16, 2, 8}));
  Value v;
  if (!v_after) v = g.relu(g.input("v", Shape::of({1, 1, 2, 8})));
  const Value k = g.rope(g.relu(g.input("k", Shape::of({1, 1, 2, 8}))), c, sn, 8, 8);
  const Value ku = g.cache_write(kc, k, pos);
  if (v_after) v = g.relu(g.input("v", Shape::of({1, 1, 2, 8})));
  g.add_output(ku);
  g.add_output(g.cache_write(vc, v, pos));
  if (k_out) g.add_output(k);
  if (k_read) g.add_output(g.exp(k));
  plan::PlanOptions o;  // the caches written in place, as the GPU backends plan them
  o.write_inputs = true;
  o.in_place = !v_after;  // v_after: the rope gets bytes of its own (its dead input's go to v)
  return plan::build_schedule(g, o);
}

TEST(CacheWriteRopePlan, TheWriteRotatesTheKeysItCaches) {
  for (bool v_after : {false, true}) {
    SCOPED_TRACE(v_after ? "v computed after the k write" : "v computed first");
    const plan::Schedule s = rope_cache_schedule(v_after, false, false);
    const auto p = plan::plan_cache_write_ropes(s, {});
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p.begin()->first, step_of(s, "cache_write"));
    EXPECT_EQ(p.begin()->second, step_of(s, "rope"));
  }
  {  // paired with the v write, which launches both: the rope's input still holds there
    const plan::Schedule s = rope_cache_schedule(false, false, false);
    const auto pairs = plan::plan_cache_write_pairs(s);
    ASSERT_EQ(pairs.size(), 1u);
    const auto p = plan::plan_cache_write_ropes(s, pairs);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p.begin()->first, pairs.begin()->second);  // the first (k) write
  }
}

TEST(CacheWriteRopePlan, NearMissesRunTheRope) {
  EXPECT_TRUE(plan::plan_cache_write_ropes(rope_cache_schedule(false, true, false), {}).empty());  // also an output
  EXPECT_TRUE(plan::plan_cache_write_ropes(rope_cache_schedule(false, false, true), {}).empty());  // read elsewhere
  {  // paired, but v is computed into the bytes of the rope's dead input before the pair launches
    const plan::Schedule s = rope_cache_schedule(true, false, false);
    const auto pairs = plan::plan_cache_write_pairs(s);
    ASSERT_EQ(pairs.size(), 1u);
    const size_t rope = step_of(s, "rope");
    bool overwritten = false;
    for (size_t j = rope + 1; j < pairs.begin()->first; ++j)
      for (const plan::TensorRef& w : s.steps[j].out) overwritten |= plan::arena_overlap(w, s.steps[rope].in.at(0));
    ASSERT_TRUE(overwritten) << "the memory plan no longer reuses the dead input's bytes; rebuild this case";
    EXPECT_TRUE(plan::plan_cache_write_ropes(s, pairs).empty());
  }
  {  // rows that are a cast of the rope's result (another dtype than the cache's)
    Graph g;
    const Value pos = g.input("pos", Shape::of({1}, DType::I64));
    const Value c = g.input("c", Shape::of({1, 4})), sn = g.input("s", Shape::of({1, 4}));
    const Value k = g.rope(g.relu(g.input("k", Shape::of({1, 1, 2, 8}))), c, sn, 8, 8);
    g.add_output(g.cache_write(g.input("kc", Shape::of({1, 16, 2, 8}, DType::F16)), g.cast(k, DType::F16), pos));
    EXPECT_TRUE(plan::plan_cache_write_ropes(plan::build_schedule(g), {}).empty());
  }
}

// q = rope(qin), k = rope(relu(kin)) written into the k cache, v into the v cache: the q rope
// joins the writes' launch. `q_read`: a step reads q before the writes; `in_place`: q is
// rope(relu(qin)), which the memory plan writes over its dying input.
plan::Schedule q_rope_schedule(bool q_read, bool in_place) {
  Graph g;
  const Value pos = g.input("pos", Shape::of({1}, DType::I64));
  const Value c = g.input("c", Shape::of({1, 4})), sn = g.input("s", Shape::of({1, 4}));
  const Value v = g.relu(g.input("v", Shape::of({1, 1, 2, 8})));
  const Value kx = g.relu(g.input("k", Shape::of({1, 1, 2, 8})));
  const Value qin = g.input("q", Shape::of({1, 1, 4, 8}));
  const Value q = g.rope(in_place ? g.relu(qin) : qin, c, sn, 8, 8);
  const Value k = g.rope(kx, c, sn, 8, 8);
  if (q_read) g.add_output(g.exp(q));
  g.add_output(g.cache_write(g.input("kc", Shape::of({1, 16, 2, 8})), k, pos));
  g.add_output(g.cache_write(g.input("vc", Shape::of({1, 16, 2, 8})), v, pos));
  g.add_output(q);
  plan::PlanOptions o;
  o.write_inputs = true;
  o.in_place = in_place;
  return plan::build_schedule(g, o);
}

TEST(CacheWriteRopePlan, TheQRopeJoinsTheWritesLaunch) {
  {
    const plan::Schedule s = q_rope_schedule(false, false);
    const auto pairs = plan::plan_cache_write_pairs(s);
    const auto ropes = plan::plan_cache_write_ropes(s, pairs);
    ASSERT_EQ(pairs.size(), 1u);
    ASSERT_EQ(ropes.size(), 1u);
    const auto q = plan::plan_cache_write_q_ropes(s, pairs, ropes);
    ASSERT_EQ(q.size(), 1u);
    EXPECT_EQ(q.begin()->first, pairs.begin()->first);  // the launch: the second (v) write
    EXPECT_EQ(q.begin()->second, step_of(s, "rope"));   // the first rope: q's
    EXPECT_TRUE(plan::plan_cache_write_q_ropes(s, pairs, {}).empty());  // no absorbed partner
  }
  for (const auto& [q_read, in_place] : {std::pair{true, false}, std::pair{false, true}}) {
    SCOPED_TRACE(q_read ? "q read before the writes" : "q rotated in place");
    const plan::Schedule s = q_rope_schedule(q_read, in_place);
    const size_t q = step_of(s, "rope");
    if (in_place) {
      ASSERT_TRUE(plan::arena_overlap(s.steps[q].out.at(0), s.steps[q].in.at(0))) << "the rope is no longer in place";
    }
    const auto pairs = plan::plan_cache_write_pairs(s);
    EXPECT_TRUE(plan::plan_cache_write_q_ropes(s, pairs, plan::plan_cache_write_ropes(s, pairs)).empty());
  }
}

}  // namespace
}  // namespace rlx
