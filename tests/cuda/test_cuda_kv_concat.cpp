// Attention decode reading a KV cache and its new rows in place (plan_attention_concats): which
// concats are absorbed (planned on the Schedule, no device needed) and parity with the CPU
// oracle when they are, when they are not (RLX_CUDA_ATTN_CONCAT=0) and on the near misses.
// Also the q/k RoPE pairs of the same decode layer (plan_rope_pairs).
#ifdef RLX_HAVE_CUDA
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "models/transformer.h"
#include "passes/pipeline.h"
#include "plan/absorb.h"
#include "plan/schedule.h"
#include "runtime/backend.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using rlx::testing::ScopedEnv;

struct Decode {
  Graph g;
  Value k, v, out;
};

// One decode step: q_len query rows over a cache of `past` rows plus `new_rows` new ones (default
// q_len), GQA 4/2.
Decode decode_graph(DType t, AttnLayout layout = AttnLayout::BSHD, int64_t past = 37, int64_t q_len = 1,
                    MaskKind mask = MaskKind::Causal, int64_t new_rows = 0) {
  Decode d;
  if (new_rows == 0) new_rows = q_len;
  const bool bshd = layout == AttnLayout::BSHD;
  auto shape = [&](int64_t s, int64_t h) { return bshd ? Shape::of({2, s, h, 64}, t) : Shape::of({2, h, s, 64}, t); };
  const int64_t axis = bshd ? 1 : 2;
  d.k = d.g.concat({d.g.param("k_cache", shape(past, 2)), d.g.input("k_new", shape(new_rows, 2))}, axis);
  d.v = d.g.concat({d.g.param("v_cache", shape(past, 2)), d.g.input("v_new", shape(new_rows, 2))}, axis);
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

// The attention half of a Llama decode layer as the model builders write it: separate q/k/v
// products (merged into one by the optimizer, its parts read as views), RoPE on q and k, the
// caches joined with the new rows. The memory plan reuses the roped k (dead after the K
// concat) for the V concat's result, so absorbing the K concat relies on the V concat being
// absorbed too.
Graph decode_layer_graph(DType t, int64_t past) {
  Graph g;
  const int64_t e = 256, h = 4, hkv = 2, d = 64;
  const Value x = g.input("x", Shape::of({1, 1, e}, t));
  const auto [cos, sin] = models::build_rope_tables(g, g.input("pos", Shape::of({1}, DType::I64)), d, 10000.0, t);
  auto proj = [&](const std::string& name, int64_t heads) {
    return g.reshape(g.matmul(x, g.param(name, Shape::of({e, heads * d}, t))), {1, 1, heads, d});
  };
  const Value q = g.rope(proj("wq", h), cos, sin, d, d);
  const Value k = g.concat({g.param("k_cache", Shape::of({1, past, hkv, d}, t)), g.rope(proj("wk", hkv), cos, sin, d, d)}, 1);
  const Value v = g.concat({g.param("v_cache", Shape::of({1, past, hkv, d}, t)), proj("wv", hkv)}, 1);
  ops::Attention a;
  a.num_heads = h, a.num_kv_heads = hkv, a.head_dim = d, a.mask_kind = MaskKind::Causal;
  const Value ctx = g.reshape(g.attention(q, k, v, std::nullopt, a), {1, 1, h * d});
  g.add_output(g.matmul(ctx, g.param("wo", Shape::of({h * d, e}, t))));
  return g;
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

// The decode layer as the CUDA backend plans it (optimized for its claims).
plan::Schedule decode_layer_schedule() {
  const Graph opt = passes::optimize_for_backend(decode_layer_graph(DType::BF16, 40),
                                                 *make_backend_for_check(Device::Cuda), CompileOptions{});
  return plan::build_schedule(opt);
}

TEST(CudaKvConcat, PlannerTakesBothConcatsWhenOneReusesTheOthersPart) {
  const plan::Schedule s = decode_layer_schedule();
  const auto planned = cuda::plan_attention_concats(s);
  ASSERT_EQ(planned.size(), 1u);
  const auto& [attn, concats] = *planned.begin();
  ASSERT_EQ(concats.size(), 2u);
  // The case this covers: one concat's result is placed over the other concat's part.
  const bool reused = plan::arena_overlap(s.steps[concats[1]].out.at(0), s.steps[concats[0]].in.at(1)) ||
                      plan::arena_overlap(s.steps[concats[0]].out.at(0), s.steps[concats[1]].in.at(1));
  EXPECT_TRUE(reused) << "the memory plan changed; this test no longer covers the reuse";
  // Taken alone (the other concat runs), that concat's part would be overwritten.
  const plan::AbsorbIndex index(s);
  EXPECT_FALSE(index.inputs_survive(concats[0], attn) && index.inputs_survive(concats[1], attn));
}

// The optimized decode layer's q and k RoPEs are both taken by the attention, also where the
// memory plan put a rope's input under the attention's result (checked at lowering).
TEST(CudaAttnRope, PlannerTakesBothRopesOfTheModelLayer) {
  const plan::Schedule s = decode_layer_schedule();
  const auto ropes = cuda::plan_attention_ropes(s, cuda::plan_attention_concats(s));
  ASSERT_EQ(ropes.size(), 1u);
  EXPECT_EQ(ropes.begin()->second.size(), 2u);
}

// The memory plan puts the q rope's input exactly in the attention result's place. Each block
// writes only its own head group's rows, which it has read first, so that rope is still rotated
// on load with one split, with the ticket merge and with the cluster merge.
TEST(CudaAttnRope, QRopeInTheResultsPlaceIsReadInPlaceInEveryMergeMode) {
  const plan::Schedule s = decode_layer_schedule();
  const auto ropes = cuda::plan_attention_ropes(s, cuda::plan_attention_concats(s));
  ASSERT_EQ(ropes.size(), 1u);
  const auto& [attn, taken] = *ropes.begin();
  size_t in_place = 0;
  for (size_t r : taken) {
    const plan::TensorRef &in = s.steps[r].in.at(0), &out = s.steps[attn].out.at(0);
    if (plan::arena_overlap(in, out)) {
      EXPECT_EQ(s.steps[r].out.at(0).value, s.steps[attn].in.at(0).value) << "only q's rope may share the result's place";
      EXPECT_EQ(in.loc.offset, out.loc.offset);
      EXPECT_EQ(in.loc.bytes, out.loc.bytes);
      ++in_place;
    }
  }
  ASSERT_EQ(in_place, 1u) << "the memory plan changed; this test no longer covers a rope in the result's place";
  RLX_REQUIRE_CUDA();
  const std::pair<const char*, const char*> modes[] = {
      {"RLX_CUDA_ATTN_DECODE_KEYS", "1048576"},  // one split
      {"RLX_CUDA_ATTN_CLUSTER", "0"},            // ticket merge
      {"RLX_CUDA_ATTN_CLUSTER", "16"},           // cluster merge
  };
  for (const auto& [name, value] : modes)
    for (DType t : rlx::testing::kCudaFloats) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + name + "=" + value);
      ScopedEnv env(name, value);
      const Graph g = decode_layer_graph(t, 300);
      rlx::testing::ParityOptions o;
      o.fixed_params = models::random_weights(g, 11);
      o.fixed_inputs.emplace_back("pos", Tensor::i64({1}, std::vector<int64_t>{300}));
      const uint64_t before = cuda::attention_rope_reads();
      rlx::testing::expect_cuda_parity(g, Precision::Fp32, o);
      EXPECT_EQ(cuda::attention_rope_reads(), before + taken.size());
    }
}

// The q and k RoPEs of the decode layer run in one launch; near misses keep two.
TEST(CudaRopePairs, PlannerPairsTheQAndKRopes) {
  const auto pairs = cuda::plan_rope_pairs(decode_layer_schedule());
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs.begin()->first, pairs.begin()->second + 1);
  auto count = [](const Graph& h) { return cuda::plan_rope_pairs(plan::build_schedule(h)).size(); };
  const Shape tab = Shape::of({3, 8});
  {  // different tables
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab), c2 = h.input("c2", tab);
    h.add_output(h.rope(h.input("q", Shape::of({1, 3, 4, 16})), c, sn, 16, 16));
    h.add_output(h.rope(h.input("k", Shape::of({1, 3, 2, 16})), c2, sn, 16, 16));
    EXPECT_EQ(count(h), 0u);
  }
  {  // the second rotates the first's result
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab);
    h.add_output(h.rope(h.rope(h.input("q", Shape::of({1, 3, 4, 16})), c, sn, 16, 16), c, sn, 16, 16));
    EXPECT_EQ(count(h), 0u);
  }
  {  // the same pair is taken
    Graph h;
    const Value c = h.input("c", tab), sn = h.input("s", tab);
    h.add_output(h.rope(h.input("q", Shape::of({1, 3, 4, 16})), c, sn, 16, 16));
    h.add_output(h.rope(h.input("k", Shape::of({1, 3, 2, 16})), c, sn, 16, 16));
    EXPECT_EQ(count(h), 1u);
  }
}

TEST(CudaRopePairs, PairedLaunchMatchesTheCpu) {
  RLX_REQUIRE_CUDA();
  for (DType t : rlx::testing::kCudaFloats) {
    SCOPED_TRACE(dtype_name(t));
    Graph h;
    const Shape tab = Shape::of({3, 8}, t);
    const Value c = h.input("c", tab), sn = h.input("s", tab);
    h.add_output(h.rope(h.input("q", Shape::of({2, 3, 4, 20}, t)), c, sn, 20, 16));  // 4 dims copied
    h.add_output(h.rope(h.input("k", Shape::of({2, 3, 2, 20}, t)), c, sn, 20, 16));
    ASSERT_EQ(cuda::plan_rope_pairs(plan::build_schedule(h)).size(), 1u);
    rlx::testing::expect_cuda_parity(h);
  }
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
  // More new rows than query rows: up to 16 are staged in shared memory, more are read from
  // global memory where they are.
  for (int64_t new_rows : {int64_t{9}, int64_t{20}})
    for (DType t : rlx::testing::kCudaFloats) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " new rows " + std::to_string(new_rows));
      Decode d = decode_graph(t, AttnLayout::BSHD, 300, 2, MaskKind::Causal, new_rows);
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
  for (DType t : rlx::testing::kCudaFloats) {  // both concats, one placed over the other's part
    SCOPED_TRACE(std::string("decode layer ") + dtype_name(t));
    const Graph g = decode_layer_graph(t, 300);
    rlx::testing::ParityOptions o;  // model-scaled weights: uniform [-1, 1] ones make f32 ill-conditioned
    o.fixed_params = models::random_weights(g, 11);
    o.fixed_inputs.emplace_back("pos", Tensor::i64({1}, std::vector<int64_t>{300}));
    const uint64_t before = cuda::attention_concat_reads(), ropes = cuda::attention_rope_reads();
    rlx::testing::expect_cuda_parity(g, Precision::Fp32, o);
    EXPECT_EQ(cuda::attention_concat_reads(), before + 2);
    EXPECT_EQ(cuda::attention_rope_reads(), ropes + 2);  // q and the new K rows rotated on load
  }
  {  // caches computed by earlier kernels (not leaves): read only after waiting for them
    Graph g;
    auto shape = [](int64_t s, int64_t h) { return Shape::of({2, s, h, 64}, DType::BF16); };
    const Value kc = g.relu(g.input("k_cache", shape(200, 2))), vc = g.tanh(g.input("v_cache", shape(200, 2)));
    const Value k = g.concat({kc, g.input("k_new", shape(1, 2))}, 1);
    const Value v = g.concat({vc, g.input("v_new", shape(1, 2))}, 1);
    ops::Attention a;
    a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 64, a.mask_kind = MaskKind::Causal;
    g.add_output(g.attention(g.input("q", shape(1, 4)), k, v, std::nullopt, a));
    g.add_output(kc);  // outputs: the memory plan gives nothing else their bytes
    g.add_output(vc);
    const uint64_t before = cuda::attention_concat_reads();
    rlx::testing::expect_cuda_parity(g);
    EXPECT_EQ(cuda::attention_concat_reads(), before + 2);
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
