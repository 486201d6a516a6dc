// DequantMatMul on CUDA: the kernel's source compiles (NVRTC, no GPU needed) for every format and
// activation dtype; on a GPU, every format against the exact product with the dequantized weight
// (computed in double here from the CPU's reference dequantizer), for decode (M = 1), a few rows,
// a chunked prefill (M = 37), a batch dim, and K of several blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "quant/ggml_blocks.h"
#include "rlx/gguf.h"
#include "rlx/rlx.h"
#include "support/quant_weights.h"

namespace {

using namespace rlx;

constexpr QuantFormat kAll[] = {QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q5_0, QuantFormat::Q5_1,
                                QuantFormat::Q8_0, QuantFormat::Q2_K, QuantFormat::Q3_K, QuantFormat::Q4_K,
                                QuantFormat::Q5_K, QuantFormat::Q6_K};

std::string fmt_name(QuantFormat f) { return EnumNames<QuantFormat>::names[static_cast<size_t>(f)]; }

TEST(CudaKernelSources, DequantGemvCompilesForEveryFormat) {
  // Every format's decoder once (f16 activations, vector loads); the activation dtypes and the
  // scalar x loads on one 32-value and one K format (NVRTC takes about 0.4 s a kernel).
  auto compiles = [](QuantFormat f, DType t, bool xvec) {
    SCOPED_TRACE(fmt_name(f) + " " + dtype_name(t) + (xvec ? " xvec" : ""));
    EXPECT_GT(cuda::nvrtc_compile("dequant_gemv", cuda::dequant_gemv_source(f, t, 8, xvec), "sm_90", true).size(), 100u);
  };
  for (QuantFormat f : kAll) compiles(f, DType::F16, true);
  for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q6_K})
    for (DType t : {DType::F32, DType::BF16})
      for (bool xvec : {false, true}) compiles(f, t, xvec);
}

TEST(CudaKernelSources, DequantRowsCompilesForEveryFormat) {
  for (QuantFormat f : kAll) {
    SCOPED_TRACE(fmt_name(f));
    EXPECT_GT(cuda::nvrtc_compile("dequant_rows", cuda::dequant_rows_source(f, DType::F32), "sm_90", true).size(), 100u);
  }
  for (QuantFormat f : {QuantFormat::F16, QuantFormat::BF16})
    EXPECT_GT(cuda::nvrtc_compile("dequant_rows", cuda::dequant_rows_source(f, DType::F32), "sm_90", true).size(), 100u);
  for (DType out : {DType::F16, DType::BF16})  // 16-bit x: rows decoded to its type
    for (QuantFormat f : {QuantFormat::Q4_K, QuantFormat::Q8_0, QuantFormat::BF16})
      EXPECT_GT(cuda::nvrtc_compile("dequant_rows", cuda::dequant_rows_source(f, out), "sm_90", true).size(), 100u);
  EXPECT_THROW(cuda::dequant_rows_source(QuantFormat::Q4_0, DType::I32), Error);
}

TEST(CudaKernelSources, DequantGemvDp4aCompilesForItsFormats) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_GT(cuda::nvrtc_compile("quantize_x_q8", cuda::quantize_x_q8_source(t), "sm_90", true).size(), 100u);
  }
  for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q8_0, QuantFormat::Q4_K, QuantFormat::Q6_K})
    for (int64_t rows : {1, 3}) {
      SCOPED_TRACE(fmt_name(f) + " rows " + std::to_string(rows));
      EXPECT_GT(cuda::nvrtc_compile("dequant_gemv_dp4a", cuda::dequant_gemv_dp4a_source(f, DType::F16, rows), "sm_90", true).size(),
                100u);
    }
  EXPECT_THROW(cuda::dequant_gemv_dp4a_source(QuantFormat::Q2_K, DType::F32, 1), Error);
}

TEST(CudaDequantMatMul, MatchesTheExactProductForEveryFormat) {
  RLX_REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> x_dims;  // (..., M, K)
    int64_t n;
  };
  for (QuantFormat f : kAll) {
    const int64_t be = quant_block(f).elements, bb = quant_block(f).bytes;
    for (const Case& c : {Case{{1, 2 * be}, 40}, Case{{5, 4 * be}, 33}, Case{{37, be}, 9}, Case{{2, 3, 2 * be}, 17},
                         Case{{8, 4608}, 9}})
      for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        const int64_t k = c.x_dims.back(), n = c.n;
        int64_t m = 1;
        for (size_t i = 0; i + 1 < c.x_dims.size(); ++i) m *= c.x_dims[i];
        SCOPED_TRACE(fmt_name(f) + " " + dtype_name(t) + " m " + std::to_string(m) + " k " + std::to_string(k));
        Graph g;
        ops::DequantMatMul op;
        op.format = f;
        op.k = k;
        const Value x = g.input("x", Shape::from(c.x_dims, t));
        g.add_output(g.apply(op, {x, g.param("w", Shape::of({n, k / be * bb}, DType::U8))}));
        const auto wb = rlx::testing::random_quant_weight(f, n, k, 7 + static_cast<uint64_t>(f));
        std::mt19937_64 rng(11);
        std::uniform_real_distribution<double> u(-1.0, 1.0);
        std::vector<double> xd(static_cast<size_t>(m * k));
        for (double& v : xd) v = u(rng);
        const Tensor xt = Tensor::f64(c.x_dims, xd).cast(t);
        const std::vector<double> xr = xt.to_f64();  // x as the dtype holds it
        auto cg = Session(Device::Cuda).compile(g);
        cg.set_param("w", Tensor::from_bytes(DType::U8, {n, k / be * bb}, wb.data(), wb.size()));
        const std::vector<double> y = cg.run({{"x", xt}}).at(0).to_f64();
        const auto wf = ggml_dequantize(quant::ggml_type_of(f), wb);
        ASSERT_EQ(y.size(), static_cast<size_t>(m * n));
        // f32 accumulation error, plus the output's rounding for f16 / bf16; on the integer-dot
        // path (decode of its formats) also x's rounding to 8-bit blocks: half a step of each
        // 32-value block (max |x| / 127) times |w|.
        const double out_eps = t == DType::F32 ? 0 : (t == DType::F16 ? 1.0 / 1024 : 1.0 / 128);
        // The prefill path (x of >= 16 rows, knob cuda_dequant_gemm_rows): for f32 x, x and the
        // decoded weights rounded to TF32 (10 mantissa bits) for the tensor cores; for 16-bit x,
        // the weights decoded to x's type.
        const double tf32 = m < 16 ? 0.0 : t == DType::F16 ? 1.0 / 2048 : 1.0 / 256;
        const bool int8_x = m <= 8 && (f == QuantFormat::Q4_0 || f == QuantFormat::Q8_0 || f == QuantFormat::Q4_K ||
                                       f == QuantFormat::Q6_K);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double e = 0, a = 0, qerr = 0;
            for (int64_t q0 = 0; q0 < k; q0 += 32) {
              double amax = 0, wsum = 0;
              for (int64_t q = q0; q < q0 + 32; ++q) {
                const double p = xr[static_cast<size_t>(i * k + q)] * wf[static_cast<size_t>(j * k + q)];
                e += p;
                a += std::fabs(p);
                amax = std::max(amax, std::fabs(xr[static_cast<size_t>(i * k + q)]));
                wsum += std::fabs(wf[static_cast<size_t>(j * k + q)]);
              }
              if (int8_x) qerr += amax / 127 / 2 * wsum;
            }
            const double got = y[static_cast<size_t>(i * n + j)];
            ASSERT_NEAR(got, e, 2e-5 * a + 1e-6 + qerr + out_eps * std::fabs(e) + tf32 * a) << "row " << i << " col " << j;
          }
      }
  }
}

// Decode on the integer-dot path: a NaN or an infinity in x makes the outputs of its rows NaN (the
// 8-bit block of a non-finite value has no scale), other rows stay finite.
TEST(CudaDequantMatMul, NonFiniteXGivesNaNOnTheIntegerDotPath) {
  RLX_REQUIRE_CUDA();
  for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q8_0, QuantFormat::Q4_K, QuantFormat::Q6_K}) {
    SCOPED_TRACE(fmt_name(f));
    const int64_t k = 256, n = 8, bytes = k / quant_block(f).elements * quant_block(f).bytes;
    Graph g;
    ops::DequantMatMul op;
    op.format = f;
    op.k = k;
    g.add_output(g.apply(op, {g.input("x", Shape::of({2, k}, DType::F32)), g.param("w", Shape::of({n, bytes}, DType::U8))}));
    auto cg = Session(Device::Cuda).compile(g);
    const auto wb = rlx::testing::random_quant_weight(f, n, k, 3);
    cg.set_param("w", Tensor::from_bytes(DType::U8, {n, bytes}, wb.data(), wb.size()));
    std::vector<float> x(static_cast<size_t>(2 * k), 0.5f);
    x[40] = std::numeric_limits<float>::infinity();
    const std::vector<double> y = cg.run({{"x", Tensor::f32({2, k}, x)}}).at(0).to_f64();
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(std::isnan(y[static_cast<size_t>(j)])) << "col " << j;
      EXPECT_TRUE(std::isfinite(y[static_cast<size_t>(n + j)])) << "col " << j;
    }
  }
}

// Prefill on the tensor cores: a weight larger than the 32 MiB of decoded rows at a time (f32 x:
// chunks of 2048, 2048 and 64 rows; bf16 x, rows decoded to bf16: 4096, then 64), with the
// knob at its default and off (the decoder kernel), both against the exact product.
TEST(CudaDequantMatMul, PrefillDecodesTheWeightInChunksForTheTensorCores) {
  RLX_REQUIRE_CUDA();
  const int64_t m = 16, k = 4096, n = 4160;
  for (DType t : {DType::F32, DType::BF16})
  for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q6_K}) {
    const int64_t bytes = k / quant_block(f).elements * quant_block(f).bytes;
    const auto wb = rlx::testing::random_quant_weight(f, n, k, 31);
    const auto wf = ggml_dequantize(quant::ggml_type_of(f), wb);
    std::vector<float> xv(static_cast<size_t>(m * k));
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    for (float& v : xv) v = nd(rng);
    const Tensor xt = Tensor::f32({m, k}, xv).cast(t);
    const std::vector<double> xr = xt.to_f64();  // x as its dtype holds it
    for (int64_t rows : {int64_t{0}, int64_t{16}}) {
      SCOPED_TRACE(fmt_name(f) + " " + dtype_name(t) + " cuda_dequant_gemm_rows " + std::to_string(rows));
      Graph g;
      ops::DequantMatMul op;
      op.format = f;
      op.k = k;
      g.add_output(g.apply(op, {g.input("x", Shape::of({m, k}, t)), g.param("w", Shape::of({n, bytes}, DType::U8))}));
      CompileOptions o;
      o.tuning.cuda_dequant_gemm_rows = rows;
      auto cg = Session(Device::Cuda).compile(g, o);
      cg.set_param("w", Tensor::from_bytes(DType::U8, {n, bytes}, wb.data(), wb.size()));
      const std::vector<double> y = cg.run({{"x", xt}}).at(0).to_f64();
      ASSERT_EQ(y.size(), static_cast<size_t>(m * n));
      const double out_eps = t == DType::BF16 ? 1.0 / 128 : 0.0;  // y's rounding
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double e = 0, a = 0;
          for (int64_t q = 0; q < k; ++q) {
            const double p = xr[static_cast<size_t>(i * k + q)] * wf[static_cast<size_t>(j * k + q)];
            e += p;
            a += std::fabs(p);
          }
          ASSERT_NEAR(y[static_cast<size_t>(i * n + j)], e, 2e-5 * a + 1e-6 + (rows ? a / 256 : 0.0) + out_eps * std::fabs(e))
              << i << "," << j;
        }
    }
  }
}

// Projections of one x (q/k/v, gate/up) share its 8-bit copy: three DequantMatMuls of one x, in
// three formats, give bit for bit what each gives alone.
TEST(CudaDequantMatMul, ProjectionsOfOneXShareItsQuantizedCopy) {
  RLX_REQUIRE_CUDA();
  const int64_t k = 512;
  const QuantFormat fs[] = {QuantFormat::Q4_0, QuantFormat::Q4_K, QuantFormat::Q8_0};
  const int64_t ns[] = {24, 8, 40};
  auto w_shape = [&](int i) { return Shape::of({ns[i], k / quant_block(fs[i]).elements * quant_block(fs[i]).bytes}, DType::U8); };
  std::vector<float> xv(static_cast<size_t>(2 * k));
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (float& v : xv) v = nd(rng);
  const Tensor xt = Tensor::f32({2, k}, xv);
  auto weight = [&](int i) {
    const auto wb = rlx::testing::random_quant_weight(fs[i], ns[i], k, 20 + static_cast<uint64_t>(i));
    return Tensor::from_bytes(DType::U8, w_shape(i).concrete(), wb.data(), wb.size());
  };
  Graph g;
  const Value x = g.input("x", Shape::of({2, k}, DType::F32));
  const Tensor half = Tensor::f32({}, std::vector<float>{0.5f});
  const Value h = g.mul(x, g.constant(half));  // an intermediate value, as in a decoder
  for (int i = 0; i < 3; ++i) {
    ops::DequantMatMul op;
    op.format = fs[i];
    op.k = k;
    g.add_output(g.apply(op, {h, g.param("w" + std::to_string(i), w_shape(i))}));
  }
  auto cg = Session(Device::Cuda).compile(g);
  for (int i = 0; i < 3; ++i) cg.set_param("w" + std::to_string(i), weight(i));
  const auto together = cg.run({{"x", xt}});
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(fmt_name(fs[i]));
    Graph one;
    const Value x1 = one.input("x", Shape::of({2, k}, DType::F32));
    ops::DequantMatMul op;
    op.format = fs[i];
    op.k = k;
    one.add_output(one.apply(op, {one.mul(x1, one.constant(half)), one.param("w", w_shape(i))}));
    auto c1 = Session(Device::Cuda).compile(one);
    c1.set_param("w", weight(i));
    EXPECT_EQ(c1.run({{"x", xt}}).at(0).to_f64(), together.at(static_cast<size_t>(i)).to_f64());
  }
}

}  // namespace
