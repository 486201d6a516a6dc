// DequantMatMul's 16-bit float weight formats (QuantFormat::F16 / BF16: 32-value pieces of 64
// bytes) on CUDA: the generic decoder kernel (kernels/dequant.h, FMT 10 / 11) compiles with NVRTC
// (no GPU needed), and on a GPU matches the f64 product with the widened weight.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "quant/ggml_blocks.h"
#include "rlx/gguf.h"
#include "rlx/rlx.h"

namespace rlx {
namespace {

constexpr QuantFormat kHalf[] = {QuantFormat::F16, QuantFormat::BF16};

TEST(CudaKernelSources, DequantGemvCompilesForTheHalfFormats) {
  for (QuantFormat f : kHalf)
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      for (bool xvec : {false, true}) {
        SCOPED_TRACE(std::string(enum_name(f)) + " " + dtype_name(t) + (xvec ? " xvec" : ""));
        EXPECT_GT(cuda::nvrtc_compile("dequant_gemv", cuda::dequant_gemv_source(f, t, 8, xvec), "sm_90", true).size(), 100u);
      }
}

TEST(CudaKernelSources, DequantGemvHalfCompilesForTheHalfFormats) {
  for (QuantFormat f : kHalf)
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      for (bool xvec : {false, true}) {
        SCOPED_TRACE(std::string(enum_name(f)) + " " + dtype_name(t) + (xvec ? " xvec" : ""));
        EXPECT_GT(cuda::nvrtc_compile("dequant_gemv_half", cuda::dequant_gemv_half_source(f, t, 3, xvec), "sm_90", true).size(), 100u);
      }
  EXPECT_THROW(cuda::dequant_gemv_half_source(QuantFormat::Q4_0, DType::F32, 1, true), Error);
}

TEST(CudaDequantMatMul, HalfFormatsMatchTheWidenedProduct) {
  RLX_REQUIRE_CUDA();
  for (QuantFormat f : kHalf)
    for (int64_t m : {1, 5, 37})
      for (DType t : {DType::F32, DType::BF16})
        for (int64_t k : {96, 2080}) {  // 12 and 260 16-byte words a row
        const int64_t n = 33;
        SCOPED_TRACE(std::string(enum_name(f)) + " " + dtype_name(t) + " m " + std::to_string(m) + " k " + std::to_string(k));
        Graph g;
        ops::DequantMatMul op;
        op.format = f;
        op.k = k;
        g.add_output(g.apply(op, {g.input("x", Shape::of({m, k}, t)), g.param("w", Shape::of({n, 2 * k}, DType::U8))}));
        std::mt19937_64 rng(5);
        std::normal_distribution<float> d(0.0f, 1.0f);
        std::vector<float> wv(static_cast<size_t>(n * k));
        for (float& v : wv) v = d(rng);
        const auto wb = ggml_quantize(quant::ggml_type_of(f), wv);
        const auto wf = ggml_dequantize(quant::ggml_type_of(f), wb);
        std::vector<double> xd(static_cast<size_t>(m * k));
        for (double& v : xd) v = d(rng);
        const Tensor xt = Tensor::f64({m, k}, xd).cast(t);
        const std::vector<double> xr = xt.to_f64();
        auto cg = Session(Device::Cuda).compile(g);
        cg.set_param("w", Tensor::from_bytes(DType::U8, {n, 2 * k}, wb.data(), wb.size()));
        const std::vector<double> y = cg.run({{"x", xt}}).at(0).to_f64();
        ASSERT_EQ(y.size(), static_cast<size_t>(m * n));
        const double out_eps = t == DType::F32 ? 0 : 1.0 / 128;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double e = 0, a = 0;
            for (int64_t q = 0; q < k; ++q) {
              const double p = xr[static_cast<size_t>(i * k + q)] * wf[static_cast<size_t>(j * k + q)];
              e += p;
              a += std::fabs(p);
            }
            // x of >= 16 rows takes the prefill GEMM: f32 x in strict f32 for these formats, bf16
            // x with the BF16 format on rows decoded exactly to bf16; f16 weights with bf16 x stay
            // on the decoder kernel (decoding them to bf16 would round them).
            ASSERT_NEAR(y[static_cast<size_t>(i * n + j)], e, 1e-5 * a + out_eps * std::fabs(e) + 1e-6) << i << "," << j;
          }
      }
}

}  // namespace
}  // namespace rlx
