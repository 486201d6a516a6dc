// Decode attention's split merges and cache loads (attn_decode): key splits merged in a
// thread-block cluster through distributed shared memory (the default: at most 16 blocks, the
// non-portable size; or the portable 8), or through global partials and a ticket
// (RLX_CUDA_ATTN_CLUSTER=0); cached K/V rows copied into shared memory before the wait (the
// default when they fit) or read from global memory after an L2 prefetch (RLX_CUDA_ATTN_SMKV=0).
// Parity with the CPU oracle in every mode, and the counters that show which path ran.
#ifdef RLX_HAVE_CUDA
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using rlx::testing::AttnCase;
using rlx::testing::ScopedEnv;

struct Mode {
  const char* cluster;  // RLX_CUDA_ATTN_CLUSTER, or null for the default
  const char* smkv;     // RLX_CUDA_ATTN_SMKV, or null for the default
  bool clusters, smem;  // whether cluster merges / shared-memory cache copies must appear
};

TEST(CudaAttnDecode, EveryMergeAndCacheLoadMatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  // Caches are graph inputs (leaves), so they may be read before the wait.
  const std::vector<AttnCase> cases = {
      {AttnLayout::BSHD, MaskKind::Causal, 2, 2, 513, 32, 8, 64},  // 8 rows per KV head
      {AttnLayout::BHSD, MaskKind::None, 1, 1, 300, 4, 4, 64},
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 1, 400, 4, 1, 32, 0, 0, 50},
      {AttnLayout::BSHD, MaskKind::Custom, 3, 1, 200, 4, 2, 64},
      {AttnLayout::BHSD, MaskKind::Bias, 2, 1, 150, 2, 2, 64, 0.3, 0},
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 2048, 8, 1, 256},  // splits too long for shared memory
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 7, 4, 2, 64},      // one split
  };
  const std::vector<Mode> modes = {
      {nullptr, nullptr, true, true},  // cluster of up to 16, cached rows in shared memory
      {"8", nullptr, true, true},      // portable cluster size
      {"2", nullptr, true, true},      // two long splits
      {"0", nullptr, false, true},     // ticket merge
      {nullptr, "0", true, false},     // cached rows from global memory
      {"0", "0", false, false},        // ticket merge, cached rows from global memory
  };
  for (const Mode& m : modes) {
    SCOPED_TRACE(std::string("RLX_CUDA_ATTN_CLUSTER=") + (m.cluster ? m.cluster : "default") +
                 " RLX_CUDA_ATTN_SMKV=" + (m.smkv ? m.smkv : "default"));
    std::optional<ScopedEnv> cluster, smkv;
    if (m.cluster) cluster.emplace("RLX_CUDA_ATTN_CLUSTER", m.cluster);
    if (m.smkv) smkv.emplace("RLX_CUDA_ATTN_SMKV", m.smkv);
    const uint64_t clusters = cuda::attention_cluster_merges(), copies = cuda::attention_kv_smem_copies();
    for (DType t : rlx::testing::kCudaFloats)
      for (const AttnCase& c : cases) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " mask " + enum_name(c.mask) + " skv " + std::to_string(c.skv) +
                     " h " + std::to_string(c.h) + "/" + std::to_string(c.hkv) + " d " + std::to_string(c.d));
        rlx::testing::expect_cuda_parity(rlx::testing::attention_case_graph(c, t));
      }
    EXPECT_EQ(cuda::attention_cluster_merges() > clusters, m.clusters);
    EXPECT_EQ(cuda::attention_kv_smem_copies() > copies, m.smem);
  }
}

TEST(CudaAttnDecode, BadKnobsAreRejected) {
  RLX_REQUIRE_CUDA();
  const AttnCase c{AttnLayout::BSHD, MaskKind::Causal, 1, 1, 300, 4, 2, 64};
  for (const auto& [name, value] : {std::pair{"RLX_CUDA_ATTN_CLUSTER", "17"}, std::pair{"RLX_CUDA_ATTN_SMKV", "2"}}) {
    ScopedEnv env(name, value);
    const std::string msg =
        rlx::testing::error_message([&] { rlx::testing::cuda_parity(rlx::testing::attention_case_graph(c, DType::BF16)); });
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

}  // namespace
#endif
