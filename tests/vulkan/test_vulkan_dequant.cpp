// DequantMatMul on Vulkan (lower_dequant.cpp, kernels/dequant.h): every GGUF format against the
// exact product with the reference-dequantized weight (computed in double here), on the GEMV
// (M = 1, 3, 8; with K = 4096, 8 rows are more than lavapipe's shared memory takes in one pass)
// and the tiled kernel (M = 17, 24, 64), with batch dims, odd N (rows of 18- or 22-byte blocks ending inside a word) and K
// of one and of several blocks, for f32 / f16 / bf16 activations. On lavapipe (subgroups of 8)
// the GEMV's reductions take both paths: rows of one unit (4 invocations a row) the shared-memory
// tree, longer rows subgroupAdd. The kernels compiled for an NVIDIA-like device (subgroups of
// 32, 48 KiB of shared memory) that lavapipe is not; the claims.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/ggml_blocks.h"
#include "rlx/gguf.h"
#include "rlx/rlx.h"
#include "support/quant_weights.h"
#include "vulkan/vulkan_test_util.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/lower.h"
#include "plan/schedule.h"
#include "vulkan/source_only_context.h"
#endif

namespace {

using namespace rlx;
using namespace rlx::testing;

#ifdef RLX_HAVE_VULKAN

constexpr QuantFormat kAll[] = {QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q5_0, QuantFormat::Q5_1,
                                QuantFormat::Q8_0, QuantFormat::Q2_K, QuantFormat::Q3_K, QuantFormat::Q4_K,
                                QuantFormat::Q5_K, QuantFormat::Q6_K};

std::string fmt_name(QuantFormat f) { return EnumNames<QuantFormat>::names[static_cast<size_t>(f)]; }

Graph dequant_graph(QuantFormat f, const std::vector<int64_t>& x_dims, int64_t n, DType t) {
  const QuantBlock blk = quant_block(f);
  const int64_t k = x_dims.back();
  Graph g;
  ops::DequantMatMul op;
  op.format = f;
  op.k = k;
  g.add_output(g.apply(op, {g.input("x", Shape::from(x_dims, t)),
                            g.param("w", Shape::of({n, k / blk.elements * blk.bytes}, DType::U8))}));
  return g;
}

// Runs y = x @ dequant(w)^T on Vulkan and checks every output against the double-precision
// product of x (as its dtype holds it) with ggml_dequantize(w).
void check_product(QuantFormat f, const std::vector<int64_t>& x_dims, int64_t n, DType t) {
  const int64_t k = x_dims.back();
  int64_t m = 1;
  for (size_t i = 0; i + 1 < x_dims.size(); ++i) m *= x_dims[i];
  SCOPED_TRACE(fmt_name(f) + " " + dtype_name(t) + " m " + std::to_string(m) + " k " + std::to_string(k) + " n " +
               std::to_string(n));
  const Graph g = dequant_graph(f, x_dims, n, t);
  const auto wb = rlx::testing::random_quant_weight(f, n, k, 7 + static_cast<uint64_t>(f) + static_cast<uint64_t>(n));
  std::mt19937_64 rng(11 + static_cast<uint64_t>(m));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> xd(static_cast<size_t>(m * k));
  for (double& v : xd) v = u(rng);
  const Tensor xt = Tensor::f64(x_dims, xd).cast(t);
  const std::vector<double> xr = xt.to_f64();
  auto cg = Session(Device::Vulkan).compile(g);
  const int64_t row_bytes = static_cast<int64_t>(wb.size()) / n;
  cg.set_param("w", Tensor::from_bytes(DType::U8, {n, row_bytes}, wb.data(), wb.size()));
  const Tensor yt = cg.run({{"x", xt}}).at(0);
  std::vector<int64_t> y_dims = x_dims;
  y_dims.back() = n;
  ASSERT_EQ(yt.shape(), y_dims);
  ASSERT_EQ(yt.dtype(), t);
  const std::vector<double> y = yt.to_f64();
  const auto wf = ggml_dequantize(quant::ggml_type_of(f), wb);
  // f32 accumulation error, plus the output's rounding for f16 / bf16.
  const double out_eps = t == DType::F32 ? 0 : (t == DType::F16 ? 1.0 / 1024 : 1.0 / 128);
  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double e = 0, a = 0;
      for (int64_t q = 0; q < k; ++q) {
        const double p = xr[static_cast<size_t>(i * k + q)] * wf[static_cast<size_t>(j * k + q)];
        e += p;
        a += std::fabs(p);
      }
      const double got = y[static_cast<size_t>(i * n + j)];
      const double tol = 2e-5 * a + 1e-6 + out_eps * std::fabs(e);
      if (!(std::fabs(got - e) <= tol) && bad++ < 5)
        ADD_FAILURE() << "row " << i << " col " << j << ": got " << got << ", want " << e << " (tolerance " << tol << ")";
    }
  EXPECT_EQ(bad, 0);
}

struct Case {
  std::vector<int64_t> x_blocks;  // x's dims with K in blocks
  int64_t n;
};

std::vector<int64_t> dims_of(const Case& c, QuantFormat f) {
  std::vector<int64_t> d = c.x_blocks;
  d.back() *= quant_block(f).elements;
  return d;
}

TEST(VulkanDequant, EveryFormatMatchesTheExactProduct) {
  RLX_REQUIRE_VULKAN();
  // GEMV: M = 1 (K of 1 block and of 9), 3 (odd N), 8, batch dims of 2 x 3;
  // tiled: M = 17 (K of 3 blocks: a partial 32-deep slice for the 32-value formats), 64 (2 x 32).
  const std::vector<Case> cases = {{{1, 1}, 7},      {{1, 9}, 70},     {{3, 2}, 33},
                                   {{8, 2}, 19},     {{2, 3, 4}, 9},   {{17, 3}, 37},
                                   {{2, 32, 2}, 65}};
  for (QuantFormat f : kAll)
    for (const Case& c : cases) check_product(f, dims_of(c, f), c.n, DType::F32);
}

TEST(VulkanDequant, HalfActivations) {
  RLX_REQUIRE_VULKAN();
  for (DType t : {DType::F16, DType::BF16})
    for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q5_1, QuantFormat::Q8_0, QuantFormat::Q4_K, QuantFormat::Q6_K})
      for (const Case& c : {Case{{1, 4}, 33}, Case{{20, 2}, 17}}) check_product(f, dims_of(c, f), c.n, t);
}

TEST(VulkanDequant, LongRowsSpanSeveralChunks) {
  RLX_REQUIRE_VULKAN();
  // K = 4096: the GEMV (32 invocations a row) stages x in chunks of 32 x 4 units (M = 1) or 32
  // units (M = 8: two passes of 7 and 1 rows on lavapipe's 32 KiB), the tiled kernel walks 128 slices.
  for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q3_K, QuantFormat::Q4_K})
    for (int64_t m : {1, 8, 24}) check_product(f, {m, 4096}, 48, DType::F32);
}

// The kernels of one graph lowered for the NVIDIA-like source-only device.
std::vector<vulkan::Kernel> nvidia_kernels(const Graph& g) {
  SourceOnlyContext cx(Precision::Fp32, false, false);
  cx.dev.storage8 = cx.dev.int8 = true;
  const plan::Schedule s = plan::build_schedule(g);
  for (const plan::Step& st : s.steps)
    if (std::holds_alternative<ops::DequantMatMul>(st.op)) vulkan::lower_dequant(cx, st);
  return cx.kernels;
}

TEST(VulkanDequant, KernelsCompileForSubgroupsOf32) {
  // lavapipe runs subgroups of 8 and 32 KiB of shared memory; a discrete GPU takes the subgroup
  // reduction with one subgroup per 2 weight rows and MR = 8 (K = 4096: 32 invocations a row).
  for (QuantFormat f : kAll)
    for (int64_t m : {1, 8, 64})
      for (DType t : {DType::F32, DType::F16}) {
        SCOPED_TRACE(fmt_name(f) + " m " + std::to_string(m) + " " + dtype_name(t));
        const auto ks = nvidia_kernels(dequant_graph(f, {m, 4096}, 4096, t));
        ASSERT_EQ(ks.size(), 1u);
        EXPECT_EQ(ks[0].name, m <= 8 ? "dequant_gemv" : "dequant_gemm");
        if (m <= 8) {  // one subgroup per 2 weight rows, 4 subgroups a workgroup (512 workgroups)
          for (const char* d : {"#define SG 1", "#define TPR 32u", "#define RPW 8u", "#define NT 128u"}) {
            EXPECT_NE(ks[0].source.find(d), std::string::npos) << d;
          }
        }
        expect_glsl_compiles(ks[0]);
      }
}

TEST(VulkanDequant, ClaimsEveryGgufFormat) {
  for (QuantFormat f : kAll) {
    const Graph g = dequant_graph(f, {4, 2 * quant_block(f).elements}, 8, DType::F32);
    for (const Node& n : g.nodes()) {
      std::string why;
      EXPECT_TRUE(vulkan::vulkan_claims_node(g, n, nullptr, &why)) << fmt_name(f) << ": " << why;
    }
  }
  // A device without 8-bit storage cannot hold the weight's bytes; one without f16 arithmetic
  // takes no f16 activations: refused with the reason.
  vulkan::DeviceInfo dev;
  dev.name = "test device";
  dev.float16 = dev.storage16 = dev.int16 = true;
  const Graph g8 = dequant_graph(QuantFormat::Q4_0, {1, 32}, 8, DType::F32);
  const Node& n8 = g8.nodes().at(2);
  std::string why;
  EXPECT_FALSE(vulkan::vulkan_claims_node(g8, n8, &dev, &why));
  EXPECT_NE(why.find("8-bit"), std::string::npos) << why;
  dev.storage8 = dev.int8 = true;
  EXPECT_TRUE(vulkan::vulkan_claims_node(g8, n8, &dev, &why)) << why;
  dev.float16 = false;
  const Graph g16 = dequant_graph(QuantFormat::Q4_0, {1, 32}, 8, DType::F16);
  EXPECT_FALSE(vulkan::vulkan_claims_node(g16, g16.nodes().at(2), &dev, &why));
  EXPECT_NE(why.find("16-bit float"), std::string::npos) << why;
}

#endif  // RLX_HAVE_VULKAN

}  // namespace
