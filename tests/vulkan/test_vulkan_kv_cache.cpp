// Vulkan and the KV-cache ops: cache_write runs natively (a position outside the cache sets the
// kernel error flag, reported as rlx::Error naming cache_write), and so does the Positions
// attention mask (MASK 5 of the attention kernels: keys up to the largest position, a run-time
// length). Their numbers: the kv-cache parity cases (tests/parity/cases_kv_cache.cpp).
#include <gmock/gmock.h>

#include "backends/vulkan/lower.h"
#include "backends/vulkan/variant.h"
#include "plan/schedule.h"
#include "support/kv_cache_steps.h"
#include "plan/step_family.h"
#include "vulkan/source_only_context.h"
#include "vulkan/vulkan_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::error_message;

using rlx::testing::cache_write_graph;
using rlx::testing::first_node_of;

// q (1, sq, 4, d) over a cache of skv rows (2 KV heads) with a Positions mask of dtype pt.
Graph positions_graph(int64_t sq, int64_t skv, int64_t d, DType t, DType pt) {
  Graph a;
  const Value q = a.input("q", Shape::of({1, sq, 4, d}, t));
  const Value kv = a.input("kv", Shape::of({1, skv, 2, d}, t));
  ops::Attention at;
  at.num_heads = 4, at.num_kv_heads = 2, at.head_dim = d, at.mask_kind = MaskKind::Positions;
  a.add_output(a.attention(q, kv, kv, a.input("pos", Shape::of({sq}, pt)), at));
  return a;
}

TEST(VulkanKvCache, ClaimsCacheWriteAndThePositionsMask) {
  const Graph g = cache_write_graph();
  std::string why;
  EXPECT_TRUE(vulkan::vulkan_claims_node(g, first_node_of(g, "cache_write"), nullptr, &why)) << why;
  const Graph a = positions_graph(3, 64, 8, DType::F32, DType::I64);
  EXPECT_TRUE(vulkan::vulkan_claims_node(a, first_node_of(a, "attention"), nullptr, &why)) << why;
}

// The attention kernels take the mask as MASK 5 (no Bias mask built from iota / where): decode
// over a long cache (split keys), prefill on the SIMT and the cooperative-matrix kernels (the
// latter compiled here, run on NVIDIA by the parity cases), i32 and i64 positions.
TEST(VulkanKvCache, PositionsMaskInEveryAttentionKernel) {
  struct Want {
    int64_t sq, skv;
    DType t;
    bool coop;
    const char* kernel;
  };
  for (DType pt : {DType::I32, DType::I64})
    for (const Want& w : {Want{1, 700, DType::F32, false, "attention decode"}, Want{40, 96, DType::F32, false, "attention"},
                          Want{40, 96, DType::F16, true, "attention coopmat"}}) {
      SCOPED_TRACE(std::string(w.kernel) + " " + dtype_name(pt));
      rlx::testing::SourceOnlyContext cx(Precision::Fp32, w.coop, w.coop);
      for (const plan::Step& st : plan::build_schedule(positions_graph(w.sq, w.skv, 64, w.t, pt)).steps)
        if (plan::step_family(st.op) == plan::StepFamily::Attention) vulkan::lower_attention(cx, st);
      ASSERT_GE(cx.kernels.size(), 1u);
      EXPECT_EQ(cx.kernels[0].name, w.kernel);
      EXPECT_NE(cx.kernels[0].source.find("#define MASK 5"), std::string::npos);
      EXPECT_NE(cx.kernels[0].source.find(pt == DType::I64 ? "Pos.data[pc.off_m + 2u * e]" : "Pos.data[pc.off_m + e]"),
                std::string::npos);
      for (const vulkan::Kernel& k : cx.kernels) rlx::testing::expect_glsl_compiles(k);
    }
}

// A carried cache is written in place: the decode step's schedule records no copy of it and a
// run carries it with no device copy (the caller's tensor is never written; the rows land).
TEST(VulkanKvCache, CarriedCacheIsWrittenInPlace) {
  RLX_REQUIRE_VULKAN();
  rlx::testing::expect_carried_cache_in_place(Device::Vulkan, [] { return vulkan::vulkan_stats().copy_bytes; });
}

TEST(VulkanKvCache, PositionOutsideTheCacheIsAnError) {
  RLX_REQUIRE_VULKAN();
  auto cg = Session(Device::Vulkan).compile(cache_write_graph());
  const Tensor cache = Tensor::zeros(DType::F32, {1, 64, 2, 8}), rows = Tensor::zeros(DType::F32, {1, 3, 2, 8});
  const auto run = [&](std::vector<int64_t> p) {
    return cg.run({{"cache", cache}, {"rows", rows}, {"pos", Tensor::i64({3}, p)}});
  };
  EXPECT_NO_THROW(run({0, 63, 5}));
  EXPECT_THAT(error_message([&] { run({0, 64, 5}); }), ::testing::HasSubstr("cache_write on Vulkan: a position is outside"));
  EXPECT_THAT(error_message([&] { run({-1, 1, 5}); }), ::testing::HasSubstr("cache_write on Vulkan"));
  EXPECT_NO_THROW(run({1, 2, 3}));  // the next run is clean
}

// The k and v cache writes of a decoder in one dispatch that also rotates the keys and q (knob
// vulkan_cache_write_fusion: plan::plan_cache_write_pairs, plan_cache_write_ropes,
// plan_cache_write_q_ropes): relu(k), v + v, then that one dispatch, against the rope (q and k
// as one pair) and the two writes apart; the same rows as the CPU.
TEST(VulkanKvCache, OneDispatchRotatesAndWritesTheKAndVRows) {
  RLX_REQUIRE_VULKAN();
  rlx::testing::expect_rope_cache_writes_match_cpu(Device::Vulkan, 2, [](CompileOptions& o, int mode) {
    o.tuning.vulkan_cache_write_fusion = mode == 0;
  });
  for (const rlx::testing::RopeCacheCase& c : rlx::testing::rope_cache_cases()) {
    const Graph g = rlx::testing::rope_cache_write_graph(c);
    CompileOptions off;
    off.tuning.vulkan_cache_write_fusion = false;
    EXPECT_EQ(rlx::testing::vulkan_dispatches(g), 3u);
    EXPECT_EQ(rlx::testing::vulkan_dispatches(g, off), 5u);  // the q and k ropes pair
  }
}

}  // namespace
