// Attention decode reading a KV cache and its new rows in place (plan_attention_concats): which
// concats are absorbed (planned on the Schedule, no device needed) and parity with the CPU
// oracle when they are, when they are not (RLX_CUDA_ATTN_CONCAT=0) and on the near misses.
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

struct Decode {
  Graph g;
  Value k, v, out;
};

// One decode step: q_len query rows over a cache of `past` rows plus q_len new ones, GQA 4/2.
Decode decode_graph(DType t, AttnLayout layout = AttnLayout::BSHD, int64_t past = 37, int64_t q_len = 1,
                    MaskKind mask = MaskKind::Causal) {
  Decode d;
  const bool bshd = layout == AttnLayout::BSHD;
  auto shape = [&](int64_t s, int64_t h) { return bshd ? Shape::of({2, s, h, 64}, t) : Shape::of({2, h, s, 64}, t); };
  const int64_t axis = bshd ? 1 : 2;
  d.k = d.g.concat({d.g.param("k_cache", shape(past, 2)), d.g.input("k_new", shape(q_len, 2))}, axis);
  d.v = d.g.concat({d.g.param("v_cache", shape(past, 2)), d.g.input("v_new", shape(q_len, 2))}, axis);
  ops::Attention a;
  a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 64, a.mask_kind = mask, a.layout = layout;
  d.out = d.g.attention(d.g.input("q", shape(q_len, 4)), d.k, d.v, std::nullopt, a);
  return d;
}

size_t absorbed(const Graph& g) {
  size_t n = 0;
  for (const auto& [attn, concats] : cuda::plan_attention_concats(plan::build_schedule(g))) n += concats.size();
  return n;
}

TEST(CudaKvConcat, PlannerTakesTheCacheConcatsOfDecode) {
  for (AttnLayout layout : {AttnLayout::BSHD, AttnLayout::BHSD}) {
    Decode d = decode_graph(DType::BF16, layout);
    d.g.add_output(d.out);
    EXPECT_EQ(absorbed(d.g), 2u) << enum_name(layout);
  }
  Decode d = decode_graph(DType::F32, AttnLayout::BSHD, 0);  // an empty cache
  d.g.add_output(d.out);
  EXPECT_EQ(absorbed(d.g), 2u);
}

TEST(CudaKvConcat, NearMissesKeepTheConcat) {
  {  // the joined K is also a graph output: only V is read in place
    Decode d = decode_graph(DType::F32);
    d.g.add_output(d.out);
    d.g.add_output(d.k);
    EXPECT_EQ(absorbed(d.g), 1u);
  }
  {  // prefill-shaped: 16 query rows
    Decode d = decode_graph(DType::F32, AttnLayout::BSHD, 37, 16);
    d.g.add_output(d.out);
    EXPECT_EQ(absorbed(d.g), 0u);
  }
  {  // a concat of heads, not of the sequence
    Graph g;
    const Value k = g.concat({g.input("ka", Shape::of({1, 9, 1, 64})), g.input("kb", Shape::of({1, 9, 1, 64}))}, 2);
    ops::Attention a;
    a.num_heads = 2, a.num_kv_heads = 2, a.head_dim = 64, a.mask_kind = MaskKind::Causal;
    g.add_output(g.attention(g.input("q", Shape::of({1, 1, 2, 64})), k, g.input("v", Shape::of({1, 9, 2, 64})),
                             std::nullopt, a));
    EXPECT_EQ(absorbed(g), 0u);
  }
}

TEST(CudaKvConcat, InPlaceReadsMatchTheCpu) {
  RLX_REQUIRE_CUDA();
  for (DType t : rlx::testing::kCudaFloats)
    for (AttnLayout layout : {AttnLayout::BSHD, AttnLayout::BHSD})
      for (int64_t q_len : {int64_t{1}, int64_t{2}}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + enum_name(layout) + " q_len " + std::to_string(q_len));
        Decode d = decode_graph(t, layout, 300, q_len);
        d.g.add_output(d.out);
        const uint64_t before = cuda::attention_concat_reads();
        rlx::testing::expect_cuda_parity(d.g);
        EXPECT_EQ(cuda::attention_concat_reads(), before + 2);
      }
  {  // the joined K is an output too: it is still written, V is read in place
    Decode d = decode_graph(DType::BF16, AttnLayout::BSHD, 100);
    d.g.add_output(d.out);
    d.g.add_output(d.k);
    const uint64_t before = cuda::attention_concat_reads();
    rlx::testing::expect_cuda_parity(d.g);
    EXPECT_EQ(cuda::attention_concat_reads(), before + 1);
  }
  ScopedEnv off("RLX_CUDA_ATTN_CONCAT", "0");
  Decode d = decode_graph(DType::F32, AttnLayout::BSHD, 50, 1, MaskKind::None);
  d.g.add_output(d.out);
  const uint64_t before = cuda::attention_concat_reads();
  rlx::testing::expect_cuda_parity(d.g);
  EXPECT_EQ(cuda::attention_concat_reads(), before);
}

}  // namespace
#endif  // RLX_HAVE_CUDA
