// Decode attention's split merges and cache loads (attn_decode): key splits merged in a
// thread-block cluster through distributed shared memory (the default: at most 16 blocks, the
// non-portable size; or the portable 8), or through global partials and a ticket
// (RLX_CUDA_ATTN_CLUSTER=0); cached K/V rows copied into shared memory before the wait (the
// default when they fit) or read from global memory after an L2 prefetch (RLX_CUDA_ATTN_SMKV=0).
// Parity with the CPU oracle in every mode, and the counters that show which path ran. Also the
// tensor-core decode kernel (attn_decode_tc, the default for f16/bf16 when a KV head's keys fit in
// one block's shared memory; RLX_CUDA_ATTN_DECODE_TC=0 turns it off).
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
  ScopedEnv no_tc("RLX_CUDA_ATTN_DECODE_TC", "0");  // attn_decode for f16/bf16 too
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

// Attention of q_len rows over `skv` keys whose K and V are computed (k + k, v + v), not graph
// inputs: the decode kernels must load them after waiting for their producer.
Graph computed_kv_graph(DType t, int64_t sq, int64_t skv) {
  Graph g;
  auto shape = [&](int64_t s, int64_t h) { return Shape::of({1, s, h, 64}, t); };
  const Value k = g.input("k", shape(skv, 2)), v = g.input("v", shape(skv, 2));
  ops::Attention a;
  a.num_heads = 8, a.num_kv_heads = 2, a.head_dim = 64, a.mask_kind = MaskKind::Causal, a.layout = AttnLayout::BSHD;
  g.add_output(g.attention(g.input("q", shape(sq, 8)), g.add(k, k), g.add(v, v), std::nullopt, a));
  return g;
}

TEST(CudaAttnDecode, TensorCoreKernelMatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  // Every mask, softcap and score scale, both layouts, 1 to 16 rows per KV head (both halves of
  // the m16 tile), head dims 16 to 128, a cache shorter than one key chunk, several chunks per
  // warp, keys not a multiple of the chunk, batches.
  const std::vector<AttnCase> cases = {
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 511, 32, 8, 64},     // the Llama decode shape
      {AttnLayout::BSHD, MaskKind::Causal, 2, 2, 513, 32, 4, 64},     // 16 rows per KV head
      {AttnLayout::BHSD, MaskKind::None, 1, 1, 300, 4, 4, 64},        // one row per KV head
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 3, 400, 4, 1, 32, 0, 0, 50},
      {AttnLayout::BSHD, MaskKind::Custom, 3, 1, 200, 4, 2, 64},
      {AttnLayout::BHSD, MaskKind::Bias, 2, 1, 150, 2, 2, 64, 0.3, 0},
      {AttnLayout::BSHD, MaskKind::Causal, 1, 4, 37, 8, 2, 128, 0, 30.0},  // softcap, head_dim 128
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 7, 4, 2, 16},               // fewer keys than a chunk
      {AttnLayout::BSHD, MaskKind::Bias, 2, 1, 90, 4, 2, 96, 0, 0, 0, DType::Bool, false},
  };
  for (DType t : {DType::F16, DType::BF16})
    for (const AttnCase& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " mask " + enum_name(c.mask) + " sq " + std::to_string(c.sq) + " skv " +
                   std::to_string(c.skv) + " h " + std::to_string(c.h) + "/" + std::to_string(c.hkv) + " d " +
                   std::to_string(c.d));
      const uint64_t before = cuda::attention_tc_decodes();
      rlx::testing::expect_cuda_parity(rlx::testing::attention_case_graph(c, t));
      EXPECT_GT(cuda::attention_tc_decodes(), before);
    }
  // Other block shapes (warps x keys per chunk) on a few cases.
  for (const auto& [warps, keys] : {std::pair{"4", "64"}, std::pair{"16", "32"}, std::pair{"8", "16"}, std::pair{"1", "32"}}) {
    ScopedEnv w("RLX_CUDA_ATTN_DECODE_TC_WARPS", warps), k("RLX_CUDA_ATTN_DECODE_TC_KEYS", keys);
    for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
      SCOPED_TRACE(std::string("warps ") + warps + " keys " + keys + " case " + std::to_string(i));
      const uint64_t before = cuda::attention_tc_decodes();
      rlx::testing::expect_cuda_parity(rlx::testing::attention_case_graph(cases[i], DType::BF16));
      EXPECT_GT(cuda::attention_tc_decodes(), before);
    }
  }
  for (int64_t sq : {1, 4}) {
    SCOPED_TRACE("computed K/V, q_len " + std::to_string(sq));
    const uint64_t before = cuda::attention_tc_decodes();
    rlx::testing::expect_cuda_parity(computed_kv_graph(DType::BF16, sq, 260));
    EXPECT_GT(cuda::attention_tc_decodes(), before);
  }
}

// Near misses take attn_decode (or the prefill kernel): f32, a head_dim that is not a multiple of
// 16, more keys than one block's shared memory holds, more than 16 rows per KV head, the knob off.
TEST(CudaAttnDecode, TensorCoreKernelNearMissesTakeTheOtherPaths) {
  RLX_REQUIRE_CUDA();
  struct Miss {
    AttnCase c;
    DType t;
    const char* knob;
  };
  const std::vector<Miss> misses = {
      {{AttnLayout::BSHD, MaskKind::Causal, 1, 1, 300, 8, 2, 64}, DType::F32, nullptr},
      {{AttnLayout::BSHD, MaskKind::Causal, 1, 1, 300, 8, 2, 40}, DType::BF16, nullptr},
      {{AttnLayout::BSHD, MaskKind::Causal, 1, 1, 2048, 8, 2, 64}, DType::BF16, nullptr},
      {{AttnLayout::BSHD, MaskKind::Causal, 1, 3, 300, 12, 2, 64}, DType::BF16, nullptr},  // 18 rows
      {{AttnLayout::BSHD, MaskKind::Causal, 1, 1, 300, 8, 2, 64}, DType::BF16, "0"},
  };
  for (const Miss& m : misses) {
    SCOPED_TRACE(std::string(dtype_name(m.t)) + " skv " + std::to_string(m.c.skv) + " d " + std::to_string(m.c.d) +
                 " rows " + std::to_string(m.c.sq * m.c.h / m.c.hkv));
    std::optional<ScopedEnv> knob;
    if (m.knob) knob.emplace("RLX_CUDA_ATTN_DECODE_TC", m.knob);
    const uint64_t before = cuda::attention_tc_decodes();
    rlx::testing::expect_cuda_parity(rlx::testing::attention_case_graph(m.c, m.t));
    EXPECT_EQ(cuda::attention_tc_decodes(), before);
  }
}

TEST(CudaAttnDecode, BadKnobsAreRejected) {
  RLX_REQUIRE_CUDA();
  const AttnCase c{AttnLayout::BSHD, MaskKind::Causal, 1, 1, 300, 4, 2, 64};
  for (const auto& [name, value] : {std::pair{"RLX_CUDA_ATTN_CLUSTER", "17"}, std::pair{"RLX_CUDA_ATTN_SMKV", "2"},
                                    std::pair{"RLX_CUDA_ATTN_DECODE_TC", "2"}, std::pair{"RLX_CUDA_ATTN_DECODE_TC_WARPS", "6"},
                                    std::pair{"RLX_CUDA_ATTN_DECODE_TC_KEYS", "128"}, std::pair{"RLX_CUDA_ATTN_DECODE_EARLY", "3"}}) {
    ScopedEnv env(name, value);
    const std::string msg =
        rlx::testing::error_message([&] { rlx::testing::cuda_parity(rlx::testing::attention_case_graph(c, DType::BF16)); });
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

}  // namespace
#endif
