// The KV-cache ops: CacheWrite against a plain reference (a repeated position, bad positions,
// shape errors), written in place over carried state without touching the caller's tensor or
// copying the cache, Attention's Positions mask against the Bias-mask form (a row that sees no
// key, per-batch positions), and the legalized forms (passes/expand_cache.h) computing the same.
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/executor.h"
#include "passes/legalize.h"
#include "plan/memory_plan.h"
#include "support/kv_cache_steps.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::testing;
using ::testing::HasSubstr;

// cache with rows[b, s] copied to row pos[s] of axis 1 (pos[b * S + s] with per_batch), in order.
std::vector<double> cache_write_ref(const Tensor& cache, const Tensor& rows, const std::vector<int64_t>& pos,
                                    bool per_batch = false) {
  std::vector<double> out = to_doubles(cache);
  const std::vector<double> r = to_doubles(rows);
  const int64_t b = cache.dim(0), m = cache.dim(1), s = rows.dim(1), inner = cache.numel() / (b * m);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < s; ++i)
      for (int64_t e = 0; e < inner; ++e)
        out[static_cast<size_t>((bi * m + pos[static_cast<size_t>(per_batch ? bi * s + i : i)]) * inner + e)] =
            r[static_cast<size_t>((bi * s + i) * inner + e)];
  return out;
}

TEST(CacheWrite, MatchesTheReferenceAndTheLaterRowWins) {
  for (DType t : {DType::F32, DType::F16, DType::U8, DType::I64})
    for (DType it : {DType::I32, DType::I64}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " positions " + dtype_name(it));
      const Tensor cache = random_tensor(t, {2, 10, 3, 4}, 1, 0, 100);
      const Tensor rows = random_tensor(t, {2, 4, 3, 4}, 2, 0, 100);
      const std::vector<int64_t> pos = {9, 2, 5, 2};  // 2 twice: row 3 wins
      const Tensor out = run_op(ops::CacheWrite{}, {cache, rows, from_doubles(it, {4}, {9, 2, 5, 2})});
      EXPECT_TRUE(all_close(out, {2, 10, 3, 4}, cache_write_ref(cache, rows, pos), {0, 0}));
    }
}

// (B, S) positions: each batch entry at its own rows; a repeated position within one entry keeps
// the later row, and the same position in two entries writes both.
TEST(CacheWrite, PerBatchPositions) {
  for (DType it : {DType::I32, DType::I64}) {
    const Tensor cache = random_tensor(DType::F32, {3, 10, 2, 4}, 1);
    const Tensor rows = random_tensor(DType::F32, {3, 4, 2, 4}, 2);
    const std::vector<int64_t> pos = {9, 2, 5, 2, 0, 1, 2, 3, 2, 2, 7, 2};
    const std::vector<double> p(pos.begin(), pos.end());
    const Tensor out = run_op(ops::CacheWrite{}, {cache, rows, from_doubles(it, {3, 4}, p)});
    EXPECT_TRUE(all_close(out, {3, 10, 2, 4}, cache_write_ref(cache, rows, pos, true), {0, 0}));
  }
  const Tensor cache = random_tensor(DType::F32, {2, 8, 2, 4}, 1);
  const Tensor rows = random_tensor(DType::F32, {2, 2, 2, 4}, 2);
  const std::string msg =
      error_message([&] { run_op(ops::CacheWrite{}, {cache, rows, from_doubles(DType::I64, {2, 2}, {3, 4, 5, 8})}); });
  EXPECT_THAT(msg, HasSubstr("position 8 (batch 1, row 1) is outside the cache's 8 rows"));
  const Shape c = Shape::of({2, 8, 2, 4}), r = Shape::of({2, 3, 2, 4});
  EXPECT_NO_THROW(infer_node(ops::CacheWrite{}, {c, r, Shape::of({2, 3}, DType::I32)}));
  EXPECT_THAT(error_message([&] { infer_node(ops::CacheWrite{}, {c, r, Shape::of({3, 3}, DType::I32)}); }),
              HasSubstr("per batch entry but the rows"));
  EXPECT_THAT(error_message([&] { infer_node(ops::CacheWrite{}, {c, r, Shape::of({2, 2}, DType::I32)}); }),
              HasSubstr("one position per row"));
  EXPECT_THAT(error_message([&] { infer_node(ops::CacheWrite{}, {c, r, Shape::of({1, 2, 3}, DType::I32)}); }),
              HasSubstr("(S), one per new row, or (B, S)"));
}

TEST(CacheWrite, ShapeErrorsNameTheOperand) {
  const Shape cache = Shape::of({1, 8, 2, 4}), rows = Shape::of({1, 3, 2, 4}), pos = Shape::of({3}, DType::I64);
  EXPECT_NO_THROW(infer_node(ops::CacheWrite{}, {cache, rows, pos}));
  EXPECT_THAT(error_message([&] { infer_node(ops::CacheWrite{}, {cache, Shape::of({1, 3, 2, 4}, DType::F16), pos}); }),
              HasSubstr("cache's dtype"));
  EXPECT_THAT(error_message([&] { infer_node(ops::CacheWrite{}, {cache, Shape::of({1, 3, 8}), pos}); }),
              HasSubstr("cache's rank"));
  EXPECT_THAT(error_message([&] { infer_node(ops::CacheWrite{}, {cache, Shape::of({1, 3, 1, 4}), pos}); }),
              HasSubstr("differ in dim 2"));
  EXPECT_THAT(error_message([&] { infer_node(ops::CacheWrite{}, {cache, rows, Shape::of({3})}); }),
              HasSubstr("i32 or i64"));
  EXPECT_THAT(error_message([&] { infer_node(ops::CacheWrite{}, {cache, rows, Shape::of({2}, DType::I64)}); }),
              HasSubstr("one position per row"));
  EXPECT_THAT(error_message([&] { infer_node(ops::CacheWrite{}, {Shape::of({8}), Shape::of({3}), pos}); }),
              HasSubstr("rank >= 2"));
}

TEST(CacheWrite, PositionOutsideTheCacheIsAnError) {
  const Tensor cache = random_tensor(DType::F32, {1, 8, 2, 4}, 1);
  const Tensor rows = random_tensor(DType::F32, {1, 2, 2, 4}, 2);
  for (double bad : {8.0, -1.0, 1e12}) {
    const std::string msg =
        error_message([&] { run_op(ops::CacheWrite{}, {cache, rows, from_doubles(DType::I64, {2}, {3, bad})}); });
    EXPECT_THAT(msg, HasSubstr("cache_write: position"));
    EXPECT_THAT(msg, HasSubstr("outside the cache's 8 rows"));
  }
}

Graph decode_graph(int64_t max_ctx) { return kv_decode_graph(max_ctx); }

TEST(CacheWrite, CarriedCacheIsWrittenInPlaceAndTheCallersTensorIsUnchanged) {
  std::vector<uint64_t> per_step;
  for (int64_t max_ctx : {256, 4096}) {
    SCOPED_TRACE("max_ctx " + std::to_string(max_ctx));
    per_step.push_back(run_carried_cache_steps(Device::Cpu, max_ctx, [] { return cpu::copied_bytes(); }));
    EXPECT_EQ(per_step.back(), 32u) << "a carried step copies only the small output (8 floats)";
  }
  EXPECT_EQ(per_step[0], per_step[1]) << "the bytes copied per step must not grow with the cache";
}

// One output carried into two inputs: the two share a tensor, so neither is donated (writing one
// in place would change the other before it is read).
TEST(CacheWrite, AnOutputCarriedIntoTwoInputsIsNotWrittenInPlace) {
  Graph g;
  const Value a = g.input("a", Shape::of({1, 8, 4}));
  const Value b = g.input("b", Shape::of({1, 8, 4}));
  const Value rows = g.input("rows", Shape::of({1, 1, 4}));
  g.add_output(g.cache_write(a, rows, g.input("pos", Shape::of({1}, DType::I64))));
  g.add_output(g.mul(b, g.scalar(1.0)));  // reads b after the write
  CompiledGraph cg = Session(Device::Cpu).compile(g);
  cg.bind_state("a", 0);
  cg.bind_state("b", 0);
  const Tensor start = random_tensor(DType::F32, {1, 8, 4}, 7);
  auto run = [&](int64_t p, bool give) {
    NamedTensors in = {{"rows", random_tensor(DType::F32, {1, 1, 4}, 20 + static_cast<uint64_t>(p))},
                       {"pos", Tensor::i64({1}, std::vector<int64_t>{p})}};
    if (give) in.insert(in.end(), {{"a", start}, {"b", start}});
    return cg.run(in);
  };
  std::vector<Tensor> prev = run(0, true);
  for (int64_t p = 1; p < 4; ++p) {
    const std::vector<Tensor> cur = run(p, false);
    EXPECT_TRUE(all_close(cur[1], {1, 8, 4}, to_doubles(prev[0]), {0, 0})) << "b changed under the write, step " << p;
    prev = cur;
  }
}

TEST(CacheWrite, PlainRunLeavesTheCallersTensorUnchanged) {
  const Tensor cache = random_tensor(DType::F32, {1, 16, 2, 4}, 4);
  const Tensor before = cache.clone();
  const Tensor rows = random_tensor(DType::F32, {1, 1, 2, 4}, 5);
  const auto out = run_cpu(decode_graph(16), {{"cache", cache}, {"rows", rows}, {"pos", Tensor::i64({1}, std::vector<int64_t>{7})}});
  EXPECT_EQ(std::memcmp(cache.raw(), before.raw(), cache.nbytes()), 0);
  EXPECT_TRUE(all_close(out[1], {1, 16, 2, 4}, cache_write_ref(cache, rows, {7}), {0, 0}));
}

TEST(CacheWrite, MemoryPlanWritesOverAnInputOnlyWhenNothingReadsItLater) {
  plan::PlanOptions on;
  on.write_inputs = true;
  {
    const Graph g = decode_graph(32);
    const plan::MemoryPlan mp = plan::plan_memory(g, on);
    ASSERT_EQ(mp.written_inputs.size(), 1u);
    const plan::Location& l = mp.at(g.outputs()[1]);
    EXPECT_EQ(l.kind, plan::Location::Kind::Leaf);
    EXPECT_EQ(l.leaf, mp.written_inputs[0]);
    EXPECT_TRUE(plan::plan_memory(g).written_inputs.empty()) << "off by default (device variants)";
  }
  {  // the old cache is also an output: it must survive, so the write gets its own slot
    Graph g = decode_graph(32);
    g.add_output(g.input_nodes().empty() ? Value{} : Value{g.input_nodes()[0], 0});
    EXPECT_TRUE(plan::plan_memory(g, on).written_inputs.empty());
  }
  {  // a node after the write reads the old cache
    Graph g;
    const Value cache = g.input("cache", Shape::of({1, 8, 4}));
    const Value w = g.cache_write(cache, g.input("rows", Shape::of({1, 1, 4})), g.input("pos", Shape::of({1}, DType::I64)));
    g.add_output(g.add(w, cache));
    EXPECT_TRUE(plan::plan_memory(g, on).written_inputs.empty());
  }
}

// ---- Attention with a Positions mask -----------------------------------------------------

ops::Attention attn(MaskKind m, AttnLayout layout) {
  ops::Attention a;
  a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 8, a.mask_kind = m, a.layout = layout;
  return a;
}

// The Bias mask (B or 1, 1, Sq, Skv) of positions (B or 1 rows of Sq).
Tensor bias_of(const std::vector<std::vector<int64_t>>& pos, int64_t skv) {
  const int64_t b = static_cast<int64_t>(pos.size()), sq = static_cast<int64_t>(pos[0].size());
  std::vector<float> v;
  for (const auto& row : pos)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < skv; ++j)
        v.push_back(j <= row[static_cast<size_t>(i)] ? 0.0f : -std::numeric_limits<float>::infinity());
  return Tensor::f32({b, 1, sq, skv}, v);
}

TEST(AttentionPositions, MatchesTheBiasMaskIncludingARowThatSeesNoKey) {
  const int64_t b = 2, sq = 5, skv = 70;
  for (AttnLayout layout : {AttnLayout::BSHD, AttnLayout::BHSD})
    for (bool per_batch : {false, true}) {
      SCOPED_TRACE(std::string(enum_name(layout)) + (per_batch ? " per-batch" : ""));
      const bool bshd = layout == AttnLayout::BSHD;
      const Tensor q = random_tensor(DType::F32, bshd ? std::vector<int64_t>{b, sq, 4, 8} : std::vector<int64_t>{b, 4, sq, 8}, 1);
      const std::vector<int64_t> kd = bshd ? std::vector<int64_t>{b, skv, 2, 8} : std::vector<int64_t>{b, 2, skv, 8};
      const Tensor k = random_tensor(DType::F32, kd, 2), v = random_tensor(DType::F32, kd, 3);
      std::vector<std::vector<int64_t>> pos = {{3, 69, -1, 0, 40}};  // row 2 sees nothing
      if (per_batch) pos.push_back({7, -5, 12, 100, 1});             // past the keys: all visible
      std::vector<double> flat;
      for (const auto& r : pos) flat.insert(flat.end(), r.begin(), r.end());
      const Tensor pt = from_doubles(DType::I64, per_batch ? std::vector<int64_t>{b, sq} : std::vector<int64_t>{sq}, flat);
      const Tensor got = run_op(attn(MaskKind::Positions, layout), {q, k, v, pt});
      const Tensor want = run_op(attn(MaskKind::Bias, layout), {q, k, v, bias_of(pos, skv)});
      EXPECT_TRUE(all_close(got, want.shape(), to_doubles(want), {1e-5, 1e-6}));
      // The masked-out row is exactly zero (batch 0, row 2, every head).
      const std::vector<double> g = to_doubles(got);
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t d = 0; d < 8; ++d)
          EXPECT_EQ(g[static_cast<size_t>(bshd ? ((2 * 4 + h) * 8 + d) : ((h * sq + 2) * 8 + d))], 0.0);
    }
}

// Decode (one query row; the CPU kernel runs a KV head's two query heads together): per-batch
// positions, one of them seeing no key.
TEST(AttentionPositions, DecodeRowPerBatch) {
  const int64_t b = 3, skv = 45;
  const Tensor q = random_tensor(DType::F32, {b, 1, 4, 8}, 4);
  const Tensor k = random_tensor(DType::F32, {b, skv, 2, 8}, 5), v = random_tensor(DType::F32, {b, skv, 2, 8}, 6);
  const std::vector<std::vector<int64_t>> pos = {{17}, {-1}, {44}};
  const Tensor pt = from_doubles(DType::I64, {b, 1}, {17, -1, 44});
  const Tensor got = run_op(attn(MaskKind::Positions, AttnLayout::BSHD), {q, k, v, pt});
  const Tensor want = run_op(attn(MaskKind::Bias, AttnLayout::BSHD), {q, k, v, bias_of(pos, skv)});
  EXPECT_TRUE(all_close(got, want.shape(), to_doubles(want), {1e-5, 1e-6}));
  const std::vector<double> g = to_doubles(got);
  for (int64_t i = 32; i < 64; ++i) EXPECT_EQ(g[static_cast<size_t>(i)], 0.0);  // batch 1: no key
}

TEST(AttentionPositions, ShapeErrors) {
  const Shape q = Shape::of({1, 3, 4, 8}), kv = Shape::of({1, 10, 2, 8});
  const ops::Attention a = attn(MaskKind::Positions, AttnLayout::BSHD);
  EXPECT_NO_THROW(infer_node(a, {q, kv, kv, Shape::of({3}, DType::I32)}));
  EXPECT_THAT(error_message([&] { infer_node(a, {q, kv, kv, Shape::of({3})}); }), HasSubstr("i32 or i64"));
  EXPECT_THAT(error_message([&] { infer_node(a, {q, kv, kv, Shape::of({4}, DType::I64)}); }), HasSubstr("positions"));
  EXPECT_THAT(error_message([&] { infer_node(a, {q, kv, kv, Shape::of({1, 1, 3}, DType::I64)}); }),
              HasSubstr("(B, Sq)"));
  EXPECT_THAT(error_message([&] { infer_node(a, {q, kv, kv}); }), HasSubstr("needs a 4th input"));
}

// ---- legalized forms -------------------------------------------------------------------

TEST(KvCacheLegalize, DecompositionsComputeWhatTheKernelsDo) {
  Graph g;
  const Value q = g.input("q", Shape::of({1, 3, 4, 8}));
  const Value k = g.input("k", Shape::of({1, 3, 2, 8}));
  const Value v = g.input("v", Shape::of({1, 3, 2, 8}));
  const Value pos = g.input("pos", Shape::of({3}, DType::I32));
  const Value kc = g.cache_write(g.input("cache_k", Shape::of({1, 40, 2, 8})), k, pos);
  const Value vc = g.cache_write(g.input("cache_v", Shape::of({1, 40, 2, 8})), v, pos);
  g.add_output(g.attention(q, kc, vc, pos, attn(MaskKind::Positions, AttnLayout::BSHD)));
  g.add_output(kc);
  // Like WebGPU: neither cache_write nor a positions mask is claimed.
  const passes::ClaimFn claims = [](const Graph&, const Node& n) {
    if (std::holds_alternative<ops::CacheWrite>(n.op)) return false;
    const auto* a = std::get_if<ops::Attention>(&n.op);
    return !(a && a->mask_kind == MaskKind::Positions);
  };
  const Graph legal = passes::legalize(g, claims, "test");
  for (const Node& n : legal.nodes()) EXPECT_TRUE(claims(legal, n)) << node_label(n);
  // Two rows at one position (the later wins) and positions reaching the cache's ends.
  for (const std::vector<double>& p : {std::vector<double>{20, 21, 22}, {0, 39, 39}, {5, 5, 2}}) {
    const NamedTensors in = {{"q", random_tensor(DType::F32, {1, 3, 4, 8}, 1)},
                             {"k", random_tensor(DType::F32, {1, 3, 2, 8}, 2)},
                             {"v", random_tensor(DType::F32, {1, 3, 2, 8}, 3)},
                             {"pos", from_doubles(DType::I32, {3}, p)},
                             {"cache_k", random_tensor(DType::F32, {1, 40, 2, 8}, 4)},
                             {"cache_v", random_tensor(DType::F32, {1, 40, 2, 8}, 5)}};
    const auto want = run_cpu(g, in), got = run_cpu(legal, in);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(all_close(got[i], want[i].shape(), to_doubles(want[i]), {1e-5, 1e-6})) << "output " << i;
  }
}

// (B, S) positions: the legalized cache write and mask per batch entry.
TEST(KvCacheLegalize, PerBatchPositions) {
  Graph g;
  const Value q = g.input("q", Shape::of({2, 3, 4, 8}));
  const Value k = g.input("k", Shape::of({2, 3, 2, 8}));
  const Value pos = g.input("pos", Shape::of({2, 3}, DType::I64));
  const Value kc = g.cache_write(g.input("cache_k", Shape::of({2, 20, 2, 8})), k, pos);
  g.add_output(g.attention(q, kc, kc, pos, attn(MaskKind::Positions, AttnLayout::BSHD)));
  g.add_output(kc);
  const passes::ClaimFn claims = [](const Graph&, const Node& n) {
    if (std::holds_alternative<ops::CacheWrite>(n.op)) return false;
    const auto* a = std::get_if<ops::Attention>(&n.op);
    return !(a && a->mask_kind == MaskKind::Positions);
  };
  const Graph legal = passes::legalize(g, claims, "test");
  for (const Node& n : legal.nodes()) EXPECT_TRUE(claims(legal, n)) << node_label(n);
  const NamedTensors in = {{"q", random_tensor(DType::F32, {2, 3, 4, 8}, 1)},
                           {"k", random_tensor(DType::F32, {2, 3, 2, 8}, 2)},
                           {"pos", from_doubles(DType::I64, {2, 3}, {4, 5, 6, 0, 0, 19})},
                           {"cache_k", random_tensor(DType::F32, {2, 20, 2, 8}, 4)}};
  const auto want = run_cpu(g, in), got = run_cpu(legal, in);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i].shape(), to_doubles(want[i]), {1e-5, 1e-6})) << "output " << i;
}

}  // namespace
