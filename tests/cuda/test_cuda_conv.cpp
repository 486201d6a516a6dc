// Conv / ConvTranspose / Pool on CUDA (cuDNN): NaN windows, the exact-f32 and TF32 policies,
// CUDA graph replay, the Im2Col route without cuDNN, and the claims: what cuDNN cannot express is
// declined with a reason, and a missing cuDNN library is a clear "cuDNN not found". Parity with
// the CPU oracle over every attribute and dtype is the shared case list (tests/parity: conv*,
// pool_*). Device tests skip (printing why) without a CUDA device.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "support/conv_graphs.h"
#ifdef RLX_HAVE_CUDA
#include "backends/cuda/conv_ops.h"
#include "backends/cuda/cudnn_lib.h"
#include "backends/cuda/stats.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::kCudaFloats;
using rlx::testing::ConvCase;
using rlx::testing::conv_graph;
using rlx::testing::conv_op;
using rlx::testing::convt_op;
using rlx::testing::expect_cuda_parity;
using rlx::testing::pool_op;

// One NaN per window that holds one (the parity with the CPU is the shared case pool_max_nan_*).
TEST(CudaConv, MaxPoolPropagatesNaN) {
  RLX_REQUIRE_CUDA();
  std::vector<float> v;
  for (double d : rlx::testing::to_doubles(rlx::testing::random_tensor(DType::F32, {1, 2, 6, 6}, 7)))
    v.push_back(static_cast<float>(d));
  // 3x3 windows at stride 2 with pad 1: (0, 0) of channel 0 and (2, 2) of channel 1 each lie
  // in exactly one window.
  v[0] = std::numeric_limits<float>::quiet_NaN();
  v[36 + 2 * 6 + 2] = std::numeric_limits<float>::quiet_NaN();
  for (DType t : kCudaFloats) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor x = t == DType::F16    ? Tensor::f16({1, 2, 6, 6}, v)
                     : t == DType::BF16 ? Tensor::bf16({1, 2, 6, 6}, v)
                                        : Tensor::f32({1, 2, 6, 6}, v);
    Graph g;
    g.add_output(g.apply(pool_op(PoolKind::Max, {3, 3}, {2, 2}, {1, 1, 1, 1}),
                         {g.input("x", Shape::of({1, 2, 6, 6}, t))}));
    const auto got = rlx::testing::to_doubles(Session(Device::Cuda).compile(g).run({{"x", x}})[0]);
    int nans = 0;
    for (double d : got) nans += std::isnan(d) ? 1 : 0;
    EXPECT_EQ(nans, 2) << "one NaN window per NaN input";
  }
}

// A small CNN: several cuDNN steps share the variant's handle and workspace, with elementwise
// kernels between them; run twice (capture, then replay of the CUDA graph) on new inputs.
// Five rounded layers deep, bf16 (8-bit mantissa) drifts by a few units in the last place of
// the intermediates (seen: 0.021 at |y| = 0.2 on an H100), so it gets 5e-2.
TEST(CudaConv, SmallCnnReplaysItsCudaGraph) {
  RLX_REQUIRE_CUDA();
  for (DType t : kCudaFloats) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value x = g.input("x", Shape::of({2, 3, 16, 15}, t));
    Value h = g.apply(conv_op({}, {1, 1, 1, 1}), {x, g.param("w1", Shape::of({8, 3, 3, 3}, t)),
                                                        g.param("b1", Shape::of({8}, t))});
    h = g.relu(h);
    h = g.apply(pool_op(PoolKind::Max, {2, 2}, {2, 2}), {h});
    h = g.apply(conv_op({2, 2}, {1, 1, 1, 1}, {}, 8),
                {h, g.param("w2", Shape::of({16, 1, 3, 3}, t)), g.param("b2", Shape::of({16}, t))});
    h = g.apply(convt_op({2, 2}, {1, 1, 1, 1}, {}, {1, 1}),
                {h, g.param("w3", Shape::of({16, 4, 3, 3}, t))});
    g.add_output(g.apply(pool_op(PoolKind::Avg, {3, 3}, {}, {1, 1, 1, 1}), {h}));
    rlx::testing::ParityOptions o;
    const NamedTensors params = rlx::testing::random_params(g, o);
    auto cuda = Session(Device::Cuda).compile(g);
    auto cpu = Session(Device::Cpu).compile(g);
    for (const auto& [name, v] : params) {
      cuda.set_param(name, v);
      cpu.set_param(name, v);
    }
#ifdef RLX_HAVE_CUDA
    const uint64_t replays = cuda::run_stats().graph_replays;
#endif
    for (uint64_t seed : {11u, 12u}) {
      const NamedTensors in = {{"x", rlx::testing::random_tensor(t, {2, 3, 16, 15}, seed)}};
      const auto want = rlx::testing::to_doubles(cpu.run(in)[0]);
      const auto got = rlx::testing::to_doubles(cuda.run(in)[0]);
      ASSERT_EQ(got.size(), want.size());
      const auto tol = t == DType::BF16 ? rlx::testing::Tolerance{5e-2, 5e-2} : rlx::testing::parity_tolerance(t);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_LE(std::fabs(got[i] - want[i]), tol.atol + tol.rtol * std::fabs(want[i])) << "seed " << seed << " at " << i;
      }
    }
#ifdef RLX_HAVE_CUDA
    if (!std::getenv("RLX_CUDA_GRAPHS") && !std::getenv("RLX_CUDA_PROFILE")) {
      EXPECT_EQ(cuda::run_stats().graph_replays, replays + 1) << "the second run replays the captured graph";
    }
#endif
  }
}

// Exact f32 stays within 1e-6 of the CPU (relative norm); TF32 within the 1e-3.
TEST(CudaConv, PrecisionPolicies) {
  RLX_REQUIRE_CUDA();
  const ConvCase c{{2, 32, 14, 14}, {48, 32, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, true};
  const Graph g = conv_graph(c, DType::F32);
  rlx::testing::ParityOptions o;
  const NamedTensors in = rlx::testing::random_inputs(g, o), params = rlx::testing::random_params(g, o);
  auto run = [&](Device d, Precision p) {
    rlx::testing::RunConfig c;
    c.device = d;
    c.options.precision = p;
    return rlx::testing::to_doubles(rlx::testing::run_config(g, c, in, params).at(0));
  };
  const auto ref = run(Device::Cpu, Precision::Fp32);
  auto rel = [&](Precision p) {
    const auto got = run(Device::Cuda, p);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
    return std::sqrt(num / den);
  };
  EXPECT_LT(rel(Precision::Fp32), 1e-6);
  EXPECT_LT(rel(Precision::Tf32), 1e-3);
  EXPECT_LT(rel(Precision::Bf16), 1e-2);
}

#ifdef RLX_HAVE_CUDA
using rlx::testing::ScopedEnv;

// Runs without a GPU: the loader's "missing library" path gives the clear reason, for every op
// of the family, and the claims refuse the nodes.
TEST(CudaConvClaims, MissingCudnnLibraryIsAClearReason) {
  const ScopedEnv env("RLX_CUDNN_LIB", "/nonexistent/libcudnn_rlx_test.so.9");
  EXPECT_EQ(cuda::cudnn_library_name(), "/nonexistent/libcudnn_rlx_test.so.9");
  const std::string reason = cuda::cudnn_unavailable_reason();
  EXPECT_EQ(reason.rfind("cuDNN not found: ", 0), 0u) << reason;
  Graph g;
  const Value x = g.input("x", Shape::of({1, 2, 8, 8}));
  const Value c = g.apply(conv_op(), {x, g.param("w", Shape::of({4, 2, 3, 3}))});
  const Value p = g.apply(pool_op(PoolKind::Avg, {2, 2}), {x});
  const Value t = g.apply(convt_op(), {x, g.param("wt", Shape::of({2, 3, 3, 3}))});
  for (Value v : {c, p, t}) {
    const Node& n = g.node(v.node);
    SCOPED_TRACE(op_name(n.op));
    EXPECT_TRUE(cuda::cuda_claims_kind(op_name(n.op)));
    std::string why;
    EXPECT_FALSE(cuda::cuda_claims_node(g, n, &why));
    EXPECT_EQ(why.rfind("cuDNN not found: ", 0), 0u) << why;
#ifdef RLX_HAVE_CUDNN
    EXPECT_NE(why.find("/nonexistent/libcudnn_rlx_test.so.9"), std::string::npos) << why;
    EXPECT_NE(why.find("RLX_CUDNN_LIB"), std::string::npos) << "the reason says how to point at the library: " << why;
#endif
  }
}

// Without cuDNN a 1-d or 2-d Conv still runs: the shared legalize makes it an Im2Col (a Pad and a
// Gather) and one batched MatMul over the groups.
TEST(CudaConv, WithoutCudnnConvRunsAsIm2ColAndMatMul) {
  RLX_REQUIRE_CUDA();
  const ScopedEnv env("RLX_CUDNN_LIB", "/nonexistent/libcudnn_rlx_test.so.9");
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value x = g.input("x", Shape::of({2, 4, 9, 10}, t));
    g.add_output(g.apply(conv_op({2, 1}, {1, 2, 1, 2}, {1, 2}, 2),
                         {x, g.param("w", Shape::of({6, 2, 3, 3}, t)), g.param("b", Shape::of({6}, t))}));
    const Value x1 = g.input("x1", Shape::of({2, 3, 17}, t));
    g.add_output(g.apply(conv_op({2}, {1, 1}), {x1, g.param("w1", Shape::of({5, 3, 4}, t))}));
    // ConvTranspose: zeros between the elements, a Pad and the flipped kernel's Conv (then Im2Col).
    g.add_output(g.apply(convt_op({2, 3}, {1, 0, 2, 1}, {1, 2}, {1, 1}, 2),
                         {g.input("x2", Shape::of({2, 4, 5, 4}, t)), g.param("w2", Shape::of({4, 3, 3, 2}, t)),
                          g.param("b2", Shape::of({6}, t))}));
    expect_cuda_parity(g);
  }
}

TEST(CudaConvClaims, WindowPlansMapPadsToCudnn) {
  using cuda::CudnnWindow;
  CudnnWindow w;
  std::string why;
  // 1-d becomes 2-d with a leading axis of 1; pad = the begin pad.
  ASSERT_TRUE(cuda::cudnn_conv_window(conv_op({2}, {2, 2}, {3}), {29}, {5}, {11}, &w, &why))
      << why;
  EXPECT_EQ(w.in, (std::vector<int>{1, 29}));
  EXPECT_EQ(w.out, (std::vector<int>{1, 11}));
  EXPECT_EQ(w.kernel, (std::vector<int>{1, 5}));
  EXPECT_EQ(w.pad, (std::vector<int>{0, 2}));
  EXPECT_EQ(w.stride, (std::vector<int>{1, 2}));
  EXPECT_EQ(w.dilation, (std::vector<int>{1, 3}));
  // Asymmetric pads are fine while cuDNN's window count matches: 8 + 1 - 3 -> 4 windows at stride 2.
  ASSERT_TRUE(cuda::cudnn_conv_window(conv_op({2, 2}, {1, 1, 0, 0}), {8, 8}, {3, 3}, {4, 4}, &w, &why));
  EXPECT_EQ(w.pad, (std::vector<int>{1, 1}));
  // ... and declined (with the reason) where it does not.
  EXPECT_FALSE(cuda::cudnn_conv_window(conv_op({}, {0, 0, 2, 2}), {8, 8}, {3, 3}, {8, 8}, nullptr, &why));
  EXPECT_NE(why.find("pads both ends of an axis alike"), std::string::npos) << why;
  // ConvTranspose: output_padding + pad_begin - pad_end must stay in [0, stride).
  ASSERT_TRUE(cuda::cudnn_conv_transpose_window(
      convt_op({2, 2}, {1, 1, 1, 1}, {}, {1, 1}), {5, 6}, {3, 3}, {10, 12},
      &w, &why))
      << why;
  EXPECT_EQ(w.in, (std::vector<int>{10, 12}));  // the side the window slides over: the output
  EXPECT_EQ(w.out, (std::vector<int>{5, 6}));
  why.clear();
  EXPECT_FALSE(cuda::cudnn_conv_transpose_window(convt_op({}, {}, {2, 2}, {1, 1}),
                                                 {4, 4}, {3, 3}, {9, 9}, nullptr, &why));
  EXPECT_NE(why.find("output_padding + pad_begin - pad_end"), std::string::npos) << why;
  // Pool: no dilation in cuDNN (unless the kernel is 1 along that axis).
  why.clear();
  EXPECT_FALSE(cuda::cudnn_pool_window(pool_op(PoolKind::Max, {2, 2}, {}, {}, false, false, {2, 1}), {8, 8}, {6, 7}, nullptr, &why));
  EXPECT_NE(why.find("no dilation"), std::string::npos) << why;
  EXPECT_TRUE(cuda::cudnn_pool_window(pool_op(PoolKind::Max, {1, 2}, {}, {}, false, false, {2, 1}), {8, 8}, {8, 7}, nullptr, &why))
      << why;
  // ceil_mode: claimable when the count matches, except an average counting pads whose last
  // window runs past the end pad (cuDNN would count the missing taps).
  EXPECT_TRUE(cuda::cudnn_pool_window(pool_op(PoolKind::Avg, {3}, {2}, {1, 0}, true, true),
                                      {6}, {3}, nullptr, &why))
      << why;
  why.clear();
  EXPECT_FALSE(cuda::cudnn_pool_window(pool_op(PoolKind::Avg, {3}, {2}, {1, 0}, true, true),
                                       {5}, {3}, nullptr, &why));
  EXPECT_NE(why.find("past the end pad"), std::string::npos) << why;
  EXPECT_TRUE(cuda::cudnn_pool_window(pool_op(PoolKind::Max, {3}, {2}, {1, 0}, false, true),
                                      {5}, {3}, nullptr, &why))
      << why;
}

TEST(CudaConvClaims, DtypesAndSizesOutsideCudnnAreDeclined) {
  if (!cuda::cudnn_unavailable_reason().empty()) GTEST_SKIP() << cuda::cudnn_unavailable_reason();
  Graph g;
  const Value xi = g.input("xi", Shape::of({1, 2, 8, 8}, DType::I32));
  const Value mp = g.apply(pool_op(PoolKind::Max, {2, 2}), {xi});
  const Value xf = g.input("xf", Shape::of({1, 2, 8, 8}, DType::F32));
  const Value ok = g.apply(pool_op(PoolKind::Max, {2, 2}), {xf});
  std::string why;
  EXPECT_FALSE(cuda::cuda_claims_node(g, g.node(mp.node), &why));
  EXPECT_NE(why.find("f32, f16 or bf16"), std::string::npos) << why;
  EXPECT_TRUE(cuda::cuda_claims_node(g, g.node(ok.node), &why)) << why;
}
#endif

}  // namespace
