// Attention decode rotating q and the new K rows itself (plan_attention_ropes): which RoPEs are
// absorbed (planned on the Schedule, no device needed), parity with the CPU oracle for both
// rotation styles, partial rotation and per-batch tables, and the near misses.
#ifdef RLX_HAVE_CUDA
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "plan/schedule.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using rlx::testing::ScopedEnv;

struct RopeDecode {
  DType t = DType::BF16;
  RopeStyle style = RopeStyle::NeoX;
  int64_t n_rot = 64;          // of head_dim 64
  bool per_batch = false;      // tables per (batch, position), else per position
  bool k_own_tables = false;   // k rotated with another cos table
  bool q_rope_output = false;  // the rotated q is also a graph output
  bool k_concat = true;        // K = concat(cache, rotated new rows), else the rotated rows alone
};

// One decode step, batch 2, GQA 4/2, head_dim 64, a cache of 100 rows.
Graph rope_decode_graph(const RopeDecode& c) {
  Graph g;
  const int64_t half = c.n_rot / 2, past = 100;
  const Shape tab = c.per_batch ? Shape::of({2, 1, half}, c.t) : Shape::of({1, half}, c.t);
  const Value cs = g.input("cos", tab), sn = g.input("sin", tab);
  auto rows = [&](int64_t s, int64_t h) { return Shape::of({2, s, h, 64}, c.t); };
  const Value q = g.rope(g.input("q", rows(1, 4)), cs, sn, 64, c.n_rot, c.style);
  const Value kn = g.rope(g.input("k_new", rows(1, 2)), c.k_own_tables ? g.input("cos2", tab) : cs, sn, 64, c.n_rot,
                          c.style);
  const Value vn = g.input("v_new", rows(1, 2));
  const Value k = c.k_concat ? g.concat({g.param("k_cache", rows(past, 2)), kn}, 1) : kn;
  const Value v = c.k_concat ? g.concat({g.param("v_cache", rows(past, 2)), vn}, 1) : vn;
  ops::Attention a;
  a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 64, a.mask_kind = MaskKind::Causal;
  g.add_output(g.attention(q, k, v, std::nullopt, a));
  if (c.q_rope_output) g.add_output(q);
  return g;
}

// The rope steps absorbed into attentions, and how many of them rotate q.
std::pair<size_t, size_t> absorbed(const Graph& g) {
  const plan::Schedule s = plan::build_schedule(g);
  size_t n = 0, q = 0;
  for (const auto& [attn, ropes] : cuda::plan_attention_ropes(s, cuda::plan_attention_concats(s)))
    for (size_t r : ropes) {
      ++n;
      if (s.steps[r].out.at(0).value == s.steps[attn].in.at(0).value) ++q;
    }
  return {n, q};
}

TEST(CudaAttnRope, PlannerTakesTheQAndKRopesOfDecode) {
  EXPECT_EQ(absorbed(rope_decode_graph({})), std::make_pair(size_t{2}, size_t{1}));
  RopeDecode c;
  c.style = RopeStyle::GptJ, c.n_rot = 48, c.per_batch = true;
  EXPECT_EQ(absorbed(rope_decode_graph(c)), std::make_pair(size_t{2}, size_t{1}));
}

TEST(CudaAttnRope, NearMissesKeepTheirRopes) {
  RopeDecode c;
  c.q_rope_output = true;  // the rotated q is stored anyway: only k is taken
  EXPECT_EQ(absorbed(rope_decode_graph(c)), std::make_pair(size_t{1}, size_t{0}));
  c = {};
  c.k_own_tables = true;  // one pair of tables per launch: q's
  EXPECT_EQ(absorbed(rope_decode_graph(c)), std::make_pair(size_t{1}, size_t{1}));
  c = {};
  c.k_concat = false;  // new K rows without a cache concat: only q
  EXPECT_EQ(absorbed(rope_decode_graph(c)), std::make_pair(size_t{1}, size_t{1}));
  // A BHSD attention: the rotated tensor's [b, s, h, d] rows are not the attention's.
  Graph g;
  const Value q = g.rope(g.input("q", Shape::of({2, 4, 1, 64})), g.input("cos", Shape::of({4, 32})),
                         g.input("sin", Shape::of({4, 32})), 64, 64);
  ops::Attention a;
  a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 64, a.layout = AttnLayout::BHSD;
  g.add_output(g.attention(q, g.input("k", Shape::of({2, 2, 9, 64})), g.input("v", Shape::of({2, 2, 9, 64})),
                           std::nullopt, a));
  EXPECT_EQ(absorbed(g), std::make_pair(size_t{0}, size_t{0}));
}

TEST(CudaAttnRope, RotatedOnLoadMatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  for (DType t : rlx::testing::kCudaFloats)
    for (RopeStyle style : {RopeStyle::NeoX, RopeStyle::GptJ})
      for (bool partial : {false, true}) {
        RopeDecode c;
        c.t = t, c.style = style;
        if (partial) c.n_rot = 48, c.per_batch = true;  // 16 dims copied, tables per (batch, position)
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(style) + " n_rot " + std::to_string(c.n_rot));
        const uint64_t before = cuda::attention_rope_reads();
        rlx::testing::expect_cuda_parity(rope_decode_graph(c));
        EXPECT_EQ(cuda::attention_rope_reads(), before + 2);
      }
}

TEST(CudaAttnRope, NearMissesAndTheSwitchMatchTheCpu) {
  RLX_REQUIRE_CUDA();
  RopeDecode c;
  c.q_rope_output = true;
  uint64_t before = cuda::attention_rope_reads();
  rlx::testing::expect_cuda_parity(rope_decode_graph(c));
  EXPECT_EQ(cuda::attention_rope_reads(), before + 1);
  c = {};
  c.k_own_tables = true;
  before = cuda::attention_rope_reads();
  rlx::testing::expect_cuda_parity(rope_decode_graph(c));
  EXPECT_EQ(cuda::attention_rope_reads(), before + 1);
  ScopedEnv off("RLX_CUDA_ATTN_ROPE", "0");
  before = cuda::attention_rope_reads();
  rlx::testing::expect_cuda_parity(rope_decode_graph({}));
  EXPECT_EQ(cuda::attention_rope_reads(), before);
}

}  // namespace
#endif  // RLX_HAVE_CUDA
