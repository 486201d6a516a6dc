// Vulkan and the KV-cache ops: cache_write runs natively (a position outside the cache sets the
// kernel error flag, reported as rlx::Error naming cache_write), the Positions attention mask is
// refused by the claims and legalized into the Bias mask.
#include <gmock/gmock.h>

#include "backends/vulkan/lower.h"
#include "vulkan/vulkan_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::error_message;

Graph cache_graph() {
  Graph g;
  const Value cache = g.input("cache", Shape::of({1, 64, 2, 8}));
  const Value rows = g.input("rows", Shape::of({1, 3, 2, 8}));
  g.add_output(g.cache_write(cache, rows, g.input("pos", Shape::of({3}, DType::I64))));
  return g;
}

const Node& node_of(const Graph& g, const char* name) {
  for (const Node& n : g.nodes())
    if (std::string(op_name(n.op)) == name) return n;
  throw Error("test: no node");
}

TEST(VulkanKvCache, ClaimsCacheWriteAndRefusesThePositionsMask) {
  const Graph g = cache_graph();
  std::string why;
  EXPECT_TRUE(vulkan::vulkan_claims_node(g, node_of(g, "cache_write"), nullptr, &why)) << why;
  Graph a;
  const Value q = a.input("q", Shape::of({1, 3, 4, 8}));
  const Value kv = a.input("kv", Shape::of({1, 64, 2, 8}));
  ops::Attention at;
  at.num_heads = 4, at.num_kv_heads = 2, at.head_dim = 8, at.mask_kind = MaskKind::Positions;
  a.add_output(a.attention(q, kv, kv, a.input("pos", Shape::of({3}, DType::I64)), at));
  EXPECT_FALSE(vulkan::vulkan_claims_node(a, node_of(a, "attention"), nullptr, &why));
  EXPECT_THAT(why, ::testing::HasSubstr("positions mask"));
}

TEST(VulkanKvCache, PositionOutsideTheCacheIsAnError) {
  RLX_REQUIRE_VULKAN();
  auto cg = Session(Device::Vulkan).compile(cache_graph());
  const Tensor cache = Tensor::zeros(DType::F32, {1, 64, 2, 8}), rows = Tensor::zeros(DType::F32, {1, 3, 2, 8});
  const auto run = [&](std::vector<int64_t> p) {
    return cg.run({{"cache", cache}, {"rows", rows}, {"pos", Tensor::i64({3}, p)}});
  };
  EXPECT_NO_THROW(run({0, 63, 5}));
  EXPECT_THAT(error_message([&] { run({0, 64, 5}); }), ::testing::HasSubstr("cache_write on Vulkan: a position is outside"));
  EXPECT_THAT(error_message([&] { run({-1, 1, 5}); }), ::testing::HasSubstr("cache_write on Vulkan"));
  EXPECT_NO_THROW(run({1, 2, 3}));  // the next run is clean
}

}  // namespace
