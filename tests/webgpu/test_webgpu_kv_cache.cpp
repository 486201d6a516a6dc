// WebGPU and the KV-cache ops: cache_write runs natively (a position outside the cache sets the
// kernel error flag, reported as rlx::Error naming cache_write; the legalized form it replaces
// wrote nothing there, silently), and so does the Positions attention mask (mask 5 of the flash
// kernel: keys up to the block's largest position, a run-time length). Their numbers: the
// kv-cache parity cases (tests/parity/cases_kv_cache.cpp) and the Llama decoder below.
#include <gmock/gmock.h>

#include "backends/webgpu/lower.h"
#include "backends/webgpu/variant.h"
#include "support/kv_cache_steps.h"
#include "support/test_util.h"
#include "webgpu/webgpu_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::error_message;

using rlx::testing::cache_write_graph;
using rlx::testing::first_node_of;

TEST(WebGpuKvCache, ClaimsCacheWriteAndThePositionsMask) {
  const Graph g = cache_write_graph();
  std::string why;
  EXPECT_TRUE(webgpu::webgpu_claims_node(g, first_node_of(g, "cache_write"), nullptr, &why)) << why;
  Graph a;
  ops::Attention at;
  at.num_heads = 4, at.num_kv_heads = 2, at.head_dim = 8, at.mask_kind = MaskKind::Positions;
  const Value kv = a.input("kv", Shape::of({1, 64, 2, 8}));
  a.add_output(a.attention(a.input("q", Shape::of({1, 3, 4, 8})), kv, kv, a.input("pos", Shape::of({3}, DType::I64)), at));
  EXPECT_TRUE(webgpu::webgpu_claims_node(a, first_node_of(a, "attention"), nullptr, &why)) << why;
}

// A carried cache is written in place: the decode step's variant records no copy of it and a
// run carries it with no device copy (the caller's tensor is never written; the rows land).
TEST(WebGpuKvCache, CarriedCacheIsWrittenInPlace) {
  RLX_REQUIRE_WEBGPU();
  rlx::testing::expect_carried_cache_in_place(Device::WebGpu, [] { return webgpu::webgpu_stats().copy_bytes; });
}

TEST(WebGpuKvCache, CacheWriteRowsAndPositionOutsideTheCacheIsAnError) {
  RLX_REQUIRE_WEBGPU();
  auto cg = Session(Device::WebGpu).compile(cache_write_graph());
  std::vector<float> c(64 * 2 * 8), r(3 * 2 * 8);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i);
  for (size_t i = 0; i < r.size(); ++i) r[i] = -1.0f - static_cast<float>(i);
  const Tensor cache = Tensor::f32({1, 64, 2, 8}, c), rows = Tensor::f32({1, 3, 2, 8}, r);
  const auto run = [&](std::vector<int64_t> p) {
    return cg.run({{"cache", cache}, {"rows", rows}, {"pos", Tensor::i64({3}, p)}});
  };
  // Rows 0 and 2 both at position 5: the later one wins; every other row keeps the cache's values.
  const std::vector<float> got = run({5, 63, 5}).at(0).to_f32();
  for (int64_t p = 0; p < 64; ++p)
    for (int64_t e = 0; e < 16; ++e) {
      const float want = p == 5 ? r[static_cast<size_t>(2 * 16 + e)] : p == 63 ? r[static_cast<size_t>(16 + e)]
                                                                               : c[static_cast<size_t>(p * 16 + e)];
      ASSERT_EQ(got[static_cast<size_t>(p * 16 + e)], want) << p << "," << e;
    }
  EXPECT_THAT(error_message([&] { run({0, 64, 5}); }), ::testing::HasSubstr("cache_write on WebGPU: a position is outside"));
  EXPECT_THAT(error_message([&] { run({-1, 1, 5}); }), ::testing::HasSubstr("cache_write on WebGPU"));
  EXPECT_NO_THROW(run({1, 2, 3}));  // the next run is clean
}

}  // namespace
