// CUDA decode launches of DequantMatMul groups (plan::plan_dequant_gemv_groups, knob
// cuda_dequant_groups): a decoder block's q/k/v with their RmsNorm, the output projection with
// its residual, gate/up with the norm and silu(gate) * up, down with its residual, on every
// decode kernel (integer dots: Q4_K, Q8_0; 16-bit words: BF16, F16; the generic decoder: Q5_K),
// against the same graph with the knob off (each step its own launch) and against the CPU. The
// kernels' sources compile here without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/lower.h"
#include "cuda/cuda_test_util.h"
#include "rlx/rlx.h"
#include "support/quant_weights.h"

namespace rlx {
namespace {

std::string fmt_name(QuantFormat f) { return EnumNames<QuantFormat>::names[static_cast<size_t>(f)]; }

TEST(CudaKernelSources, DequantGroupKernelsCompile) {
  const cuda::DequantFusion both{true, true}, norm{true, false};
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_GT(cuda::nvrtc_compile("quantize_x_q8", cuda::quantize_x_q8_source(t, true), "sm_90", true).size(), 100u);
    EXPECT_GT(cuda::nvrtc_compile("dequant_gemv_dp4a", cuda::dequant_gemv_dp4a_source(QuantFormat::Q4_K, t, 2, true),
                                  "sm_90", true).size(), 100u);
    EXPECT_GT(cuda::nvrtc_compile("dequant_gemv_half", cuda::dequant_gemv_half_source(QuantFormat::BF16, t, 1, false, both),
                                  "sm_90", true).size(), 100u);
    EXPECT_GT(cuda::nvrtc_compile("dequant_gemv", cuda::dequant_gemv_source(QuantFormat::Q5_K, t, 3, false, norm),
                                  "sm_90", true).size(), 100u);
  }
}

struct Block {
  Graph g;
  std::vector<std::pair<std::string, Tensor>> params;
};

// One pre-norm decoder block of `rows` rows on DequantMatMul weights of format f (hidden e,
// ffn f_dim), the attention replaced by an input `ctx`; outputs q, k, v and the block's result.
Block decoder_block(QuantFormat f, DType t, int64_t rows, int64_t e, int64_t ffn) {
  Block b;
  Graph& g = b.g;
  uint64_t seed = 100;
  auto weight = [&](const std::string& name, int64_t n, int64_t k) {
    const QuantBlock qb = quant_block(f);
    const auto bytes = testing::random_quant_weight(f, n, k, seed++);
    b.params.emplace_back(name, Tensor::from_bytes(DType::U8, {n, k / qb.elements * qb.bytes}, bytes.data(), bytes.size()));
    return g.param(name, Shape::of({n, k / qb.elements * qb.bytes}, DType::U8));
  };
  auto project = [&](Value x, const std::string& name, int64_t n, int64_t k) {
    ops::DequantMatMul op;
    op.format = f;
    op.k = k;
    return g.apply(op, {x, weight(name, n, k)});
  };
  auto gamma = [&](const std::string& name) {
    std::vector<double> v(static_cast<size_t>(e));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5 + 0.01 * static_cast<double>(i % 37);
    b.params.emplace_back(name, Tensor::f64({e}, v).cast(t));
    return g.param(name, Shape::of({e}, t));
  };
  const Value h = g.input("h", Shape::of({1, rows, e}, t));
  const Value ctx = g.input("ctx", Shape::of({1, rows, e}, t));
  const Value x = g.rms_norm(h, gamma("attn_norm"), std::nullopt, 1e-5);
  g.add_output(project(x, "wq", e, e));
  g.add_output(project(x, "wk", e / 4, e));
  g.add_output(project(x, "wv", e / 4, e));
  const Value h1 = g.add(h, project(ctx, "wo", e, e));
  const Value y = g.rms_norm(h1, gamma("ffn_norm"), std::nullopt, 1e-5);
  const Value act = g.mul(g.silu(project(y, "wg", ffn, e)), project(y, "wu", ffn, e));
  g.add_output(g.add(h1, project(act, "wd", e, ffn)));
  return b;
}

std::vector<std::vector<double>> run_block(const Block& b, DType t, int64_t rows, int64_t e, Device d, bool groups) {
  CompileOptions o;
  o.tuning.cuda_dequant_groups = groups;
  auto cg = Session(d).compile(b.g, o);
  for (const auto& [name, v] : b.params) cg.set_param(name, v);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> hv(static_cast<size_t>(rows * e)), cv(hv.size());
  for (double& v : hv) v = u(rng);
  for (double& v : cv) v = u(rng);
  const auto outs = cg.run({{"h", Tensor::f64({1, rows, e}, hv).cast(t)}, {"ctx", Tensor::f64({1, rows, e}, cv).cast(t)}});
  std::vector<std::vector<double>> r;
  for (const Tensor& ot : outs) r.push_back(ot.to_f64());
  return r;
}

// Largest |a - b| over the largest |b| of each output.
double max_rel_diff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double worst = 0;
  for (size_t o = 0; o < b.size(); ++o) {
    double scale = 1e-30, diff = 0;
    for (size_t i = 0; i < b[o].size(); ++i) {
      scale = std::max(scale, std::fabs(b[o][i]));
      diff = std::max(diff, std::fabs(a[o][i] - b[o][i]));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

TEST(CudaDequantGroups, DecoderBlockMatchesUngroupedAndTheCpu) {
  RLX_REQUIRE_CUDA();
  constexpr int64_t e = 256, ffn = 512;
  for (QuantFormat f : {QuantFormat::Q4_K, QuantFormat::Q8_0, QuantFormat::BF16, QuantFormat::F16, QuantFormat::Q5_K})
    for (DType t : {DType::F32, DType::BF16})
      for (int64_t rows : {1, 3}) {
        SCOPED_TRACE(fmt_name(f) + " " + dtype_name(t) + " rows " + std::to_string(rows));
        const Block b = decoder_block(f, t, rows, e, ffn);
        const cuda::DequantGroupStats before = cuda::dequant_group_stats();
        const auto grouped = run_block(b, t, rows, e, Device::Cuda, true);
        const cuda::DequantGroupStats after = cuda::dequant_group_stats();
        // q/k/v (+ norm), o (+ residual), gate/up (+ norm, SwiGLU), down (+ residual).
        EXPECT_EQ(after.launches - before.launches, 4u);
        EXPECT_EQ(after.products - before.products, 7u);
        EXPECT_EQ(after.norms - before.norms, 2u);
        EXPECT_EQ(after.residuals - before.residuals, 2u);
        EXPECT_EQ(after.swiglus - before.swiglus, 1u);
        const auto single = run_block(b, t, rows, e, Device::Cuda, false);
        EXPECT_EQ(cuda::dequant_group_stats().launches, after.launches);
        const auto cpu = run_block(b, t, rows, e, Device::Cpu, true);
        // Grouped against separate launches: the same products, only the norms' sums in
        // another order (and bf16 results rounded where the steps round them).
        EXPECT_LT(max_rel_diff(grouped, single), t == DType::F32 ? 1e-5 : 2e-2);
        // Against the CPU, whose decode kernels round x too (8-bit blocks for the block formats,
        // like CUDA's integer-dot path): measured up to 2.3% of the largest output at f32.
        EXPECT_LT(max_rel_diff(grouped, cpu), 5e-2);
      }
}

}  // namespace
}  // namespace rlx
