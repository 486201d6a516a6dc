// Attention on the tensor cores (kernels/attention_mma.h, attention_wgmma.h,
// lower_attention_mma.cpp): which steps each kernel takes (host-only checks, run everywhere), and
// parity against the CPU oracle in f16 and bf16 for every mask they run, GQA, q_len != kv_len,
// head dims 16..256, both layouts and every tile configuration of both kernels (device tests,
// skipped without a GPU). On an sm_90 device head dims 64 and 128 run on the wgmma kernel.
#ifdef RLX_HAVE_CUDA
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/device.h"
#include "backends/cuda/lower_attention_mma.h"
#include "cuda/cuda_test_util.h"

namespace {

using namespace rlx;
using rlx::cuda::attention_mma_rejection;
using rlx::cuda::attention_mma_steps;
using rlx::cuda::attention_wgmma_rejection;
using rlx::cuda::attention_wgmma_steps;

using rlx::testing::ScopedEnv;

plan::AttentionGeom bshd_geom(int64_t b, int64_t s, int64_t h, int64_t d) {
  plan::AttentionGeom g;
  g.batch = b, g.q_len = s, g.kv_len = s, g.num_heads = h, g.num_kv_heads = h, g.head_dim = d, g.group = 1;
  const plan::AttnStrides st{s * h * d, h * d, d};
  g.q = g.k = g.v = g.out = st;
  g.scale = 0.125;
  return g;
}

TEST(CudaAttention, MmaEligibilityNamesWhatIsMissing) {
  alignas(16) static unsigned char buf[64];
  const void* p = buf;
  const plan::AttentionGeom ok = bshd_geom(2, 64, 4, 128);
  EXPECT_EQ(attention_mma_rejection(ok, DType::BF16, p, p, p, buf), "");
  EXPECT_EQ(attention_mma_rejection(ok, DType::F16, p, p, p, buf), "");
  EXPECT_NE(attention_mma_rejection(ok, DType::F32, p, p, p, buf).find("f32"), std::string::npos);
  for (MaskKind m : {MaskKind::Custom, MaskKind::Bias}) {
    plan::AttentionGeom g = ok;
    g.mask = m;
    EXPECT_NE(attention_mma_rejection(g, DType::BF16, p, p, p, buf).find("mask"), std::string::npos);
    EXPECT_EQ(attention_mma_rejection(g, DType::BF16, p, p, p, buf, /*custom_masks=*/true), "");
  }
  for (MaskKind m : {MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow}) {
    plan::AttentionGeom g = ok;
    g.mask = m, g.window = 8;
    EXPECT_EQ(attention_mma_rejection(g, DType::BF16, p, p, p, buf), "");
  }
  for (int64_t d : {8, 40, 272}) {
    const plan::AttentionGeom g = bshd_geom(1, 64, 2, d);
    EXPECT_NE(attention_mma_rejection(g, DType::BF16, p, p, p, buf).find("head_dim"), std::string::npos) << d;
  }
  for (int64_t d : {16, 32, 80, 96, 256}) EXPECT_EQ(attention_mma_rejection(bshd_geom(1, 64, 2, d), DType::F16, p, p, p, buf), "");
  plan::AttentionGeom decode = ok;
  decode.q_len = 15;
  EXPECT_NE(attention_mma_rejection(decode, DType::BF16, p, p, p, buf).find("q_len"), std::string::npos);
  plan::AttentionGeom odd = ok;
  odd.k.seq = 4 * 128 + 4;  // rows of k not 16-byte aligned
  EXPECT_NE(attention_mma_rejection(odd, DType::BF16, p, p, p, buf).find("stride"), std::string::npos);
  EXPECT_NE(attention_mma_rejection(ok, DType::BF16, p, buf + 2, p, buf).find("aligned"), std::string::npos);
  EXPECT_NE(attention_mma_rejection(ok, DType::BF16, p, p, p, buf + 8).find("aligned"), std::string::npos);
  {
    ScopedEnv off("RLX_CUDA_ATTN_MMA", "0");
    EXPECT_NE(attention_mma_rejection(ok, DType::BF16, p, p, p, buf).find("RLX_CUDA_ATTN_MMA"), std::string::npos);
  }
  EXPECT_EQ(attention_mma_rejection(ok, DType::BF16, p, p, p, buf), "");
}

TEST(CudaAttention, WgmmaEligibilityNamesWhatIsMissing) {
  EXPECT_EQ(attention_wgmma_rejection(128, 9, 0), "");
  EXPECT_EQ(attention_wgmma_rejection(64, 9, 0), "");
  EXPECT_NE(attention_wgmma_rejection(128, 8, 9).find("sm_90"), std::string::npos);
  EXPECT_NE(attention_wgmma_rejection(128, 10, 0).find("sm_100"), std::string::npos);
  for (int64_t d : {16, 32, 80, 96, 256}) EXPECT_NE(attention_wgmma_rejection(d, 9, 0).find("head_dim"), std::string::npos);
  ScopedEnv off("RLX_CUDA_ATTN_WGMMA", "0");
  EXPECT_NE(attention_wgmma_rejection(128, 9, 0).find("RLX_CUDA_ATTN_WGMMA=0"), std::string::npos);
}

TEST(CudaAttention, WgmmaTileComesFromTheEnvironmentOrTheDefault) {
  for (int64_t d : {64, 128}) {
    const auto t = cuda::attention_wgmma_tile(d);
    EXPECT_LE(cuda::attention_wgmma_smem(t, d), size_t{227 * 1024}) << d;
  }
  {
    ScopedEnv tile("RLX_CUDA_ATTN_WGMMA", "2,128,2,1,0");
    EXPECT_FALSE(cuda::attention_wgmma_tile(64).pipelined);
  }
  {
    ScopedEnv tile("RLX_CUDA_ATTN_WGMMA", "3,64,3,2");
    const auto t = cuda::attention_wgmma_tile(128);
    EXPECT_EQ(t.groups, 3);
    EXPECT_EQ(t.keys, 64);
    EXPECT_EQ(t.stages, 3);
    EXPECT_EQ(t.blocks, 2);
    EXPECT_EQ(t.rows(), 192);
    EXPECT_EQ(t.threads(), 512);
    EXPECT_TRUE(t.pipelined);
    EXPECT_EQ(t.launch_regs(), 64);
    EXPECT_EQ(t.consumer_regs(), 72);  // (32768 - 128 * 24) / 384, down to a multiple of 8
    EXPECT_EQ((cuda::AttnWgmmaTile{2, 128, 2, 1}.consumer_regs()), 240);
    EXPECT_EQ((cuda::AttnWgmmaTile{1, 128, 2, 1}.consumer_regs()), 0);  // 248 at launch already
    EXPECT_EQ(cuda::attention_wgmma_smem(t, 128), size_t{(192 + 2 * 3 * 64) * 128 * 2 + 1024 + 8 * 7});
  }
  for (const char* bad : {"2,128", "2,128,2,1,", "4,128,2,1", "2,96,2,1", "2,128,4,1", "2,128,2,3", "2,128,2,1,2",
                          "2,128,2,1,1,", "two"}) {
    ScopedEnv tile("RLX_CUDA_ATTN_WGMMA", bad);
    const std::string msg = rlx::testing::error_message([] { cuda::attention_wgmma_tile(128); });
    EXPECT_NE(msg.find("RLX_CUDA_ATTN_WGMMA"), std::string::npos) << bad << ": " << msg;
  }
}

TEST(CudaAttention, TileComesFromTheEnvironmentOrTheDefault) {
  {
    ScopedEnv tile("RLX_CUDA_ATTN_TILE", "8,1,128,1");
    const auto t = cuda::attention_mma_tile(64);
    EXPECT_EQ(t.warps, 8);
    EXPECT_EQ(t.m_tiles, 1);
    EXPECT_EQ(t.keys, 128);
    EXPECT_TRUE(t.q_in_regs);
    EXPECT_EQ(t.rows(), 128);
    EXPECT_EQ(cuda::attention_mma_smem(t, 64), size_t{(128 + 4 * 128) * 72 * 2});
  }
  for (const char* bad : {"4,2,64", "4,2,64,1,", "3,1,64,0", "4,3,64,0", "4,1,48,0", "4,1,64,2", "four"}) {
    ScopedEnv tile("RLX_CUDA_ATTN_TILE", bad);
    const std::string msg = rlx::testing::error_message([] { cuda::attention_mma_tile(128); });
    EXPECT_NE(msg.find("RLX_CUDA_ATTN_TILE"), std::string::npos) << bad << ": " << msg;
  }
  for (int64_t d : {32, 64, 128, 256}) {
    const auto t = cuda::attention_mma_tile(d);
    EXPECT_LE(cuda::attention_mma_smem(t, d), size_t{227 * 1024}) << d;  // fits an H100 block
    EXPECT_EQ(t.rows() % 16, 0);
  }
}

using Case = rlx::testing::AttnCase;
using rlx::testing::attention_case_graph;

std::string describe(const Case& c, DType t) {
  return std::string(dtype_name(t)) + " " + enum_name(c.layout) + " mask " + enum_name(c.mask) + " b" +
         std::to_string(c.b) + " sq" + std::to_string(c.sq) + " skv" + std::to_string(c.skv) + " h" +
         std::to_string(c.h) + "/" + std::to_string(c.hkv) + " d" + std::to_string(c.d) + " scale " +
         std::to_string(c.scale) + " softcap " + std::to_string(c.softcap) + " window " + std::to_string(c.window);
}

// Parity with the CPU oracle on inputs in [-2, 2] (so the softmax is far from uniform and a
// wrong key or row shows), and the step ran on the tensor-core kernel.
void expect_mma_parity(const Case& c, DType t) {
  SCOPED_TRACE(describe(c, t));
  const Graph g = attention_case_graph(c, t);
  rlx::testing::ParityOptions o;
  o.lo = -2.0, o.hi = 2.0;
  o.seed = static_cast<uint64_t>(c.sq * 131 + c.skv * 7 + c.d + c.h);
  const uint64_t before = attention_mma_steps();
  const auto rep = rlx::testing::cuda_parity(g, Precision::Fp32, o);
  EXPECT_TRUE(rep.pass) << rep.text;
  EXPECT_GT(attention_mma_steps(), before) << "the step did not run on the tensor-core kernel";
}

const DType kHalves[] = {DType::F16, DType::BF16};

TEST(CudaAttention, MasksLayoutsAndGqaMatchTheCpu) {
  RLX_REQUIRE_CUDA();
  const std::vector<Case> cases = {
      {AttnLayout::BSHD, MaskKind::None, 2, 100, 100, 4, 4, 64},           // q_len not a multiple of the block
      {AttnLayout::BSHD, MaskKind::Causal, 2, 300, 300, 4, 2, 128},        // GQA
      {AttnLayout::BHSD, MaskKind::Causal, 1, 77, 250, 4, 1, 128},         // kv_len > q_len, MQA, BHSD
      {AttnLayout::BHSD, MaskKind::None, 3, 50, 190, 2, 2, 64, 0.3},       // cross-length, explicit scale
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 2, 333, 333, 2, 2, 64, 0, 0, 50},
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 200, 260, 3, 1, 128, 0, 0, 1},    // window of one key
      {AttnLayout::BHSD, MaskKind::SlidingWindow, 1, 90, 90, 2, 2, 64, 0, 0, 1000},    // window past the start
      {AttnLayout::BSHD, MaskKind::Causal, 2, 40, 20, 2, 2, 64},           // q_len > kv_len: rows with no key
      {AttnLayout::BSHD, MaskKind::None, 1, 16, 16, 2, 2, 64},             // the shortest prefill
      {AttnLayout::BSHD, MaskKind::None, 1, 70, 70, 2, 2, 64, 0, 5.0},     // softcap
      {AttnLayout::BSHD, MaskKind::Causal, 1, 64, 64, 2, 1, 128, 0.2, 2.0},  // softcap + causal
  };
  for (DType t : kHalves)
    for (const auto& c : cases) expect_mma_parity(c, t);
}

TEST(CudaAttention, HeadDimsMatchTheCpu) {
  RLX_REQUIRE_CUDA();
  for (DType t : kHalves)
    for (int64_t d : {16, 32, 80, 96, 256}) {
      expect_mma_parity({AttnLayout::BSHD, MaskKind::Causal, 2, 130, 130, 2, 1, d}, t);
      expect_mma_parity({AttnLayout::BHSD, MaskKind::None, 1, 33, 47, 2, 2, d}, t);
    }
}

TEST(CudaAttention, LongSequenceMatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  for (DType t : kHalves) {
    expect_mma_parity({AttnLayout::BSHD, MaskKind::Causal, 1, 1024, 1024, 4, 2, 128}, t);
    expect_mma_parity({AttnLayout::BHSD, MaskKind::None, 2, 1000, 1000, 2, 2, 64}, t);
    expect_mma_parity({AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 1100, 1100, 2, 1, 128, 0, 0, 256}, t);
  }
}

// Every tile configuration of the mma.sync kernel (row tiles per warp, warps, key tile, Q in
// registers or not) on the masks whose boundary tiles differ per warp.
TEST(CudaAttention, EveryTileConfigurationMatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  ScopedEnv mma_sync("RLX_CUDA_ATTN_WGMMA", "0");  // head dims 64 and 128 would run on wgmma
  for (const char* tile : {"1,1,16,1", "2,2,32,0", "4,1,64,1", "4,2,64,0", "8,1,128,0", "8,2,32,1"}) {
    SCOPED_TRACE(std::string("RLX_CUDA_ATTN_TILE=") + tile);
    ScopedEnv env("RLX_CUDA_ATTN_TILE", tile);
    expect_mma_parity({AttnLayout::BSHD, MaskKind::Causal, 2, 203, 203, 4, 2, 64}, DType::BF16);
    expect_mma_parity({AttnLayout::BHSD, MaskKind::SlidingWindow, 1, 150, 181, 2, 1, 128, 0, 0, 37}, DType::F16);
    expect_mma_parity({AttnLayout::BSHD, MaskKind::None, 1, 45, 300, 2, 2, 128}, DType::BF16);
  }
}

// Every wgmma tile (warpgroups, key tile) on every mask, both layouts, GQA and ragged lengths;
// on an sm_90 device each step runs on the wgmma kernel.
TEST(CudaAttention, EveryWgmmaTileMatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  const auto& dev = rlx::cuda::device();
  if (!attention_wgmma_rejection(128, dev.cc_major, dev.cc_minor).empty())
    GTEST_SKIP() << "the wgmma kernel does not run here: " << attention_wgmma_rejection(128, dev.cc_major, dev.cc_minor);
  for (const char* tile : {"1,64,2,1,1", "1,128,3,1", "2,64,3,1", "2,128,2,1,0", "1,64,2,2,1", "3,64,3,1,0"}) {
    SCOPED_TRACE(std::string("RLX_CUDA_ATTN_WGMMA=") + tile);
    ScopedEnv env("RLX_CUDA_ATTN_WGMMA", tile);
    const uint64_t before = attention_wgmma_steps();
    expect_mma_parity({AttnLayout::BSHD, MaskKind::Causal, 2, 203, 203, 4, 2, 64}, DType::BF16);
    expect_mma_parity({AttnLayout::BHSD, MaskKind::SlidingWindow, 1, 150, 181, 2, 1, 128, 0, 0, 37}, DType::F16);
    expect_mma_parity({AttnLayout::BSHD, MaskKind::None, 1, 45, 300, 2, 2, 128}, DType::BF16);
    expect_mma_parity({AttnLayout::BSHD, MaskKind::Causal, 1, 64, 64, 2, 1, 128, 0.2, 2.0}, DType::BF16);  // softcap
    expect_mma_parity({AttnLayout::BSHD, MaskKind::Causal, 2, 40, 20, 2, 2, 64}, DType::F16);  // rows with no key
    EXPECT_EQ(attention_wgmma_steps(), before + 5);
  }
  // A tile whose register share cannot hold the accumulators is refused, naming the knob.
  ScopedEnv tight("RLX_CUDA_ATTN_WGMMA", "3,128,2,2");
  const Case c{AttnLayout::BSHD, MaskKind::None, 1, 64, 64, 2, 2, 128};
  const std::string msg =
      rlx::testing::error_message([&] { rlx::testing::cuda_parity(attention_case_graph(c, DType::BF16)); });
  EXPECT_NE(msg.find("RLX_CUDA_ATTN_WGMMA"), std::string::npos) << msg;
}

// Custom keep masks and additive biases run on the wgmma kernel (an sm_90 device) and match.
TEST(CudaAttention, WgmmaCustomMasksAndBiasesMatchTheCpu) {
  RLX_REQUIRE_CUDA();
  const auto& dev = rlx::cuda::device();
  if (!attention_wgmma_rejection(64, dev.cc_major, dev.cc_minor).empty())
    GTEST_SKIP() << "the wgmma kernel does not run here: " << attention_wgmma_rejection(64, dev.cc_major, dev.cc_minor);
  std::vector<Case> cases;
  Case c{AttnLayout::BSHD, MaskKind::Custom, 3, 130, 200, 4, 2, 64};
  cases.push_back(c);
  c = {AttnLayout::BHSD, MaskKind::Custom, 2, 64, 64, 2, 2, 128};
  c.mask_type = DType::F32;
  cases.push_back(c);
  c = {AttnLayout::BSHD, MaskKind::Bias, 2, 100, 150, 4, 1, 128, 0.2};
  cases.push_back(c);
  c = {AttnLayout::BSHD, MaskKind::Bias, 4, 128, 128, 2, 2, 64, 0, 3.0};  // key padding + softcap
  c.bias_per_row = false;
  cases.push_back(c);
  for (DType t : kHalves)
    for (const Case& k : cases) {
      const uint64_t before = attention_wgmma_steps();
      expect_mma_parity(k, t);
      EXPECT_EQ(attention_wgmma_steps(), before + 1) << describe(k, t);
    }
}

// What the tensor-core kernel does not take still runs (on the CUDA-core kernel) and matches.
TEST(CudaAttention, OtherStepsStayOnTheCudaCoreKernel) {
  RLX_REQUIRE_CUDA();
  const std::vector<std::pair<Case, DType>> cases = {
      {{AttnLayout::BSHD, MaskKind::Causal, 2, 64, 64, 2, 2, 64}, DType::F32},
      {{AttnLayout::BSHD, MaskKind::Causal, 1, 8, 300, 4, 2, 128}, DType::BF16},  // decode-sized q_len
      {{AttnLayout::BSHD, MaskKind::None, 1, 40, 40, 2, 2, 36}, DType::F16},      // head_dim 36
  };
  for (const auto& [c, t] : cases) {
    SCOPED_TRACE(describe(c, t));
    const uint64_t before = attention_mma_steps();
    const auto rep = rlx::testing::cuda_parity(attention_case_graph(c, t));
    EXPECT_TRUE(rep.pass) << rep.text;
    EXPECT_EQ(attention_mma_steps(), before);
  }
  ScopedEnv off("RLX_CUDA_ATTN_MMA", "0");
  const uint64_t before = attention_mma_steps();
  const Case c{AttnLayout::BSHD, MaskKind::Causal, 1, 64, 64, 2, 2, 64};
  EXPECT_TRUE(rlx::testing::cuda_parity(attention_case_graph(c, DType::BF16)).pass);
  EXPECT_EQ(attention_mma_steps(), before);
}

TEST(CudaAttention, OversizedTileIsAnError) {
  RLX_REQUIRE_CUDA();
  ScopedEnv tile("RLX_CUDA_ATTN_TILE", "8,2,128,0");  // 256 rows + 2 x 2 x 128 keys of 264 elements
  const Case c{AttnLayout::BSHD, MaskKind::None, 1, 64, 64, 2, 2, 256};
  const std::string msg =
      rlx::testing::error_message([&] { rlx::testing::cuda_parity(attention_case_graph(c, DType::BF16)); });
  EXPECT_NE(msg.find("RLX_CUDA_ATTN_TILE"), std::string::npos) << msg;
}

}  // namespace
#endif  // RLX_HAVE_CUDA
