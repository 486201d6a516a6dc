// DequantMatMul: the verifier, shape inference, JSON, and the CPU paths against an f32 product
// with the dequantized weight (computed in double; tolerances: ops/dequant_test_util.h).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/quant_matmul.h"
#include "passes/legalize.h"
#include "quant/ggml_blocks.h"
#include "ops/dequant_test_util.h"
#include "rlx/serialize.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using namespace rlx::testing;
using namespace rlx::dqtest;

constexpr QuantFormat kAll[] = {QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q5_0, QuantFormat::Q5_1,
                                QuantFormat::Q8_0, QuantFormat::Q2_K, QuantFormat::Q3_K, QuantFormat::Q4_K,
                                QuantFormat::Q5_K, QuantFormat::Q6_K, QuantFormat::F16,  QuantFormat::BF16};

TEST(DequantMatMulCpu, EveryPathEveryFormat) {
  for (QuantFormat f : kAll) {
    // k: 16 32-value blocks, and a count that leaves a remainder after the decode kernel's
    // 4-block unrolling (17 blocks; 3 superblocks for the K formats).
    for (const auto& [m, k] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 512}, {3, 512}, {5, 512}, {17, 512}, {1, quant_block(f).elements == 256 ? 768 : 544},
             {6, quant_block(f).elements == 256 ? 768 : 544}, {23, 256}}) {
      const int64_t n = 37;  // Int8Gemm: four 8-row tiles and a tile of 5
      SCOPED_TRACE(std::string(enum_name(f)) + " m=" + std::to_string(m) + " k=" + std::to_string(k));
      const auto x = normal(static_cast<size_t>(m * k), 100 + m);
      const auto w = random_weight(f, n, k, 7);
      const Exact e = exact(f, x, m, k, w, n);
      std::vector<float> y(static_cast<size_t>(m * n));
      for (cpu::DequantPath p : {cpu::DequantPath::Reference, cpu::DequantPath::DequantGemm, cpu::DequantPath::Int8,
                                 cpu::DequantPath::Int8Gemm, cpu::DequantPath::Auto}) {
        SCOPED_TRACE("path " + std::to_string(static_cast<int>(p)));
        std::fill(y.begin(), y.end(), -1e30f);
        cpu::dequant_matmul(p, f, x.data(), m, k, w.data(), n, y.data());
        // x quantized: Int8 (native formats), Int8Gemm (its formats, else it is DequantGemm), and
        // Auto on the path it picks for m.
        const bool auto_int8 = m < cpu::kDequantGemmMinRows ? cpu::dequant_matmul_int8_native(f) : cpu::int8_gemm_format(f);
        const bool int8 = (p == cpu::DequantPath::Int8 && cpu::dequant_matmul_int8_native(f)) ||
                          (p == cpu::DequantPath::Int8Gemm && cpu::int8_gemm_format(f)) ||
                          (p == cpu::DequantPath::Auto && auto_int8);
        EXPECT_TRUE(close(y, e, int8));
      }
    }
  }
}

TEST(DequantMatMulCpu, Int8IsNativeForTheMainFormats) {
  if (!cpu::dequant_matmul_int8_native(QuantFormat::Q8_0)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q5_0, QuantFormat::Q5_1, QuantFormat::Q8_0,
                        QuantFormat::Q4_K, QuantFormat::Q5_K, QuantFormat::Q6_K})
    EXPECT_TRUE(cpu::dequant_matmul_int8_native(f)) << enum_name(f);
  EXPECT_FALSE(cpu::dequant_matmul_int8_native(QuantFormat::Q2_K));
}

// F16 / BF16 weights: never quantized x-side (the Int8 path multiplies in f32, so every path is
// held to the f32 tolerance above), on AVX2 + F16C the widen-in-registers kernels.
TEST(DequantMatMulCpu, HalfFormats) {
  EXPECT_FALSE(cpu::dequant_matmul_int8_native(QuantFormat::F16));
  EXPECT_FALSE(cpu::dequant_matmul_half_native(QuantFormat::Q8_0));
  if (cpu::dequant_matmul_int8_native(QuantFormat::Q8_0)) {  // AVX2 / FMA / F16C
    EXPECT_TRUE(cpu::dequant_matmul_half_native(QuantFormat::F16));
    EXPECT_TRUE(cpu::dequant_matmul_half_native(QuantFormat::BF16));
  }
  EXPECT_EQ(quant_block(QuantFormat::F16).bytes, 64);
  EXPECT_EQ(quant::quant_format_of(GgmlType::BF16), QuantFormat::BF16);
  // Every row count of the 4-row and 1-row kernels, K of one 32-value piece up to several, and
  // special values (inf, NaN, subnormal weights) giving what IEEE f32 arithmetic gives.
  for (QuantFormat f : {QuantFormat::F16, QuantFormat::BF16}) {
    for (int64_t k : {32, 96, 544}) {
      for (int64_t m : {1, 2, 4, 7, 16}) {
        SCOPED_TRACE(std::string(enum_name(f)) + " k=" + std::to_string(k) + " m=" + std::to_string(m));
        const int64_t n = 9;
        const auto x = normal(static_cast<size_t>(m * k), 300 + k + m);
        const auto w = random_weight(f, n, k, 11 + k);
        const Exact e = exact(f, x, m, k, w, n);
        std::vector<float> y(static_cast<size_t>(m * n));
        for (cpu::DequantPath p : {cpu::DequantPath::Int8, cpu::DequantPath::DequantGemm, cpu::DequantPath::Auto}) {
          std::fill(y.begin(), y.end(), -1e30f);
          cpu::dequant_matmul(p, f, x.data(), m, k, w.data(), n, y.data());
          EXPECT_TRUE(close(y, e, false)) << "path " << static_cast<int>(p);
        }
      }
    }
    const int64_t k = 64, n = 3;
    std::vector<float> wv(static_cast<size_t>(n * k), 0.5f);
    wv[5] = std::numeric_limits<float>::infinity();   // row 0: inf * x[5] > 0
    wv[k + 7] = std::numeric_limits<float>::quiet_NaN();  // row 1: NaN
    wv[2 * k + 1] = 1e-39f;                            // row 2: a tiny value (subnormal in f32; 0 in f16)
    std::vector<uint8_t> w(static_cast<size_t>(n * k * 2));
    for (size_t i = 0; i < wv.size(); ++i) {
      const uint16_t h = f == QuantFormat::F16 ? f32_to_f16_bits(wv[i]) : f32_to_bf16_bits(wv[i]);
      std::memcpy(w.data() + 2 * i, &h, 2);
    }
    std::vector<float> x(static_cast<size_t>(k), 1.0f), y(n);
    cpu::dequant_matmul(cpu::DequantPath::Int8, f, x.data(), 1, k, w.data(), n, y.data());
    EXPECT_TRUE(std::isinf(y[0]) && y[0] > 0) << y[0];
    EXPECT_TRUE(std::isnan(y[1])) << y[1];
    EXPECT_FLOAT_EQ(y[2], 0.5f * (k - 1));
  }
}

TEST(DequantMatMulCpu, Avx2DecoderMatchesTheReferenceDecoder) {
  for (QuantFormat f : kAll) {
    if (!cpu::dequant_matmul_int8_native(f) && !cpu::dequant_matmul_half_native(f)) continue;
    SCOPED_TRACE(enum_name(f));
    const int64_t k = 512, n = 5;
    const auto w = random_weight(f, n, k, 9);
    const auto want = ggml_dequantize(quant::ggml_type_of(f), w);
    std::vector<float> got(want.size());
    cpu::avx2::decode_rows(f, w.data(), static_cast<int64_t>(w.size()) / n, n, k, got.data());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6 * (1.0 + std::fabs(want[i]))) << "value " << i;
  }
}

// quantize_x_row / quantize_x_row_k (vector lanes where the CPU has AVX2) against the rule
// written out: d = max|x| / 127, q = x * (127 / max|x|) rounded to nearest even and clamped to
// +-127; a non-finite value makes d NaN. Ties (x * inv exactly k + 0.5), zeros, a zero block,
// tiny and huge magnitudes, NaN and inf.
TEST(DequantMatMulCpu, XQuantizersFollowTheRule) {
  const int64_t k = 1024;
  std::vector<float> x = normal(static_cast<size_t>(k), 77, 3.0f);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(32 + i)] = 0.0f;                 // a zero block
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(64 + i)] = static_cast<float>(i - 16) + 0.5f;  // ties
  x[64] = 127.0f;  // inv = 1: x * inv = x, so the .5 values are ties
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(96 + i)] *= 1e-30f;
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(128 + i)] *= 1e30f;
  x[200] = std::nanf("");
  x[300] = -std::numeric_limits<float>::infinity();
  x[700] = std::numeric_limits<float>::infinity();
  auto rule = [&](int64_t b0, int64_t len, float& d, std::vector<int>& q) {
    float amax = 0;
    bool finite = true;
    for (int64_t i = b0; i < b0 + len; ++i) {
      amax = std::max(amax, std::fabs(x[static_cast<size_t>(i)]));
      finite = finite && std::isfinite(x[static_cast<size_t>(i)]);
    }
    d = finite ? amax / 127.0f : std::nanf("");
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    q.clear();
    for (int64_t i = b0; i < b0 + len; ++i) {
      const float r = std::nearbyint(x[static_cast<size_t>(i)] * inv);
      q.push_back(std::isfinite(r) ? static_cast<int>(std::clamp(r, -127.0f, 127.0f)) : 0);
    }
  };
  std::vector<cpu::XBlock> xb(static_cast<size_t>(k / 32));
  cpu::quantize_x_row(x.data(), k, xb.data());
  std::vector<int> q;
  for (int64_t b = 0; b < k / 32; ++b) {
    SCOPED_TRACE("block " + std::to_string(b));
    float d;
    rule(32 * b, 32, d, q);
    const cpu::XBlock& o = xb[static_cast<size_t>(b)];
    EXPECT_TRUE(std::memcmp(&d, &o.d, 4) == 0 || (std::isnan(d) && std::isnan(o.d))) << d << " vs " << o.d;
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 32; ++i) {
      if (std::isfinite(d)) {
        EXPECT_EQ(o.q[i], q[static_cast<size_t>(i)]) << i;
      }
      (i < 16 ? s0 : s1) += o.q[i];
    }
    EXPECT_EQ(o.sum[0], s0);
    EXPECT_EQ(o.sum[1], s1);
  }
  std::vector<cpu::XBlockK> xk(static_cast<size_t>(k / 256));
  cpu::quantize_x_row_k(x.data(), k, xk.data());
  for (int64_t b = 0; b < k / 256; ++b) {
    SCOPED_TRACE("superblock " + std::to_string(b));
    float d;
    rule(256 * b, 256, d, q);
    const cpu::XBlockK& o = xk[static_cast<size_t>(b)];
    EXPECT_TRUE(std::memcmp(&d, &o.d, 4) == 0 || (std::isnan(d) && std::isnan(o.d))) << d << " vs " << o.d;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 16 * g; i < 16 * g + 16; ++i) {
        if (std::isfinite(d)) {
        EXPECT_EQ(o.q[i], q[static_cast<size_t>(i)]) << i;
      }
        sum += o.q[i];
      }
      EXPECT_EQ(o.bsum[g], sum);
    }
    for (int u = 0; u < 8; ++u) EXPECT_EQ(o.usum[u], o.bsum[2 * u] + o.bsum[2 * u + 1]);
  }
}

TEST(DequantMatMulCpu, ExtremeBlocks) {
  // Largest magnitudes: x blocks at +-127 after scaling, Q8_0 weights of -128 (raw bytes), zero blocks.
  const int64_t k = 64, n = 3, m = 2;
  std::vector<float> x(static_cast<size_t>(m * k), 0.0f);
  for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(i)] = (i % 2 ? 1000.0f : -1000.0f);  // row 1 stays zero
  std::vector<uint8_t> w(static_cast<size_t>(n * (k / 32) * 34), 0x80);  // q = -128 everywhere
  const uint16_t d = f32_to_f16_bits(0.5f);
  for (size_t b = 0; b < w.size(); b += 34) std::memcpy(w.data() + b, &d, 2);
  const Exact e = exact(QuantFormat::Q8_0, x, m, k, w, n);
  std::vector<float> y(static_cast<size_t>(m * n));
  cpu::dequant_matmul(cpu::DequantPath::Int8, QuantFormat::Q8_0, x.data(), m, k, w.data(), n, y.data());
  EXPECT_TRUE(close(y, e, true));
}

TEST(DequantMatMulCpu, ExtremeKBlocks) {
  // Largest integer sums of the K kernels: every q at its maximum, x at +-127 steps, Q6_K scales of
  // -128 and Q5_K scales / mins of 63 (all bits set), sane f16 d / dmin.
  const int64_t k = 512, n = 2, m = 5;
  std::vector<float> x(static_cast<size_t>(m * k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 ? 1000.0f : -1000.0f);
  const uint16_t d = f32_to_f16_bits(0.01f);
  for (QuantFormat f : {QuantFormat::Q5_K, QuantFormat::Q6_K, QuantFormat::Q4_K}) {
    SCOPED_TRACE(enum_name(f));
    const QuantBlock blk = quant_block(f);
    std::vector<uint8_t> w(static_cast<size_t>(n * k / blk.elements * blk.bytes), 0xFF);
    for (size_t b = 0; b < w.size(); b += static_cast<size_t>(blk.bytes)) {
      if (f == QuantFormat::Q6_K) {
        std::memset(w.data() + b + 192, 0x80, 16);
        std::memcpy(w.data() + b + 208, &d, 2);
      } else {
        std::memcpy(w.data() + b, &d, 2);
        std::memcpy(w.data() + b + 2, &d, 2);
      }
    }
    const Exact e = exact(f, x, m, k, w, n);
    std::vector<float> y(static_cast<size_t>(m * n));
    cpu::dequant_matmul(cpu::DequantPath::Int8, f, x.data(), m, k, w.data(), n, y.data());
    EXPECT_TRUE(close(y, e, cpu::dequant_matmul_int8_native(f)));
  }
}

TEST(DequantMatMulCpu, NonFiniteXGivesNaN) {
  const int64_t k = 32, n = 2;
  std::vector<float> x(32, 1.0f);
  x[3] = std::nanf("");
  const auto w = random_weight(QuantFormat::Q8_0, n, k, 1);
  std::vector<float> y(2);
  cpu::dequant_matmul(cpu::DequantPath::Int8, QuantFormat::Q8_0, x.data(), 1, k, w.data(), n, y.data());
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
}

// ---- the op ------------------------------------------------------------------------------

ops::DequantMatMul dq(QuantFormat f, int64_t k) {
  ops::DequantMatMul op;
  op.format = f;
  op.k = k;
  return op;
}

TEST(DequantMatMulOp, InfersSymbolicRows) {
  Graph g;
  Value x = g.input("x", Shape({Dim(2), Dim::symbol("seq"), Dim(256)}, DType::F16));
  Value w = g.param("w", Shape({100, 144}, DType::U8));
  Value y = g.apply(dq(QuantFormat::Q4_K, 256), {x, w});
  EXPECT_EQ(g.shape(y), Shape({Dim(2), Dim::symbol("seq"), Dim(100)}, DType::F16));
  EXPECT_EQ(op_attrs_str(g.node(y.node).op), "format=q4_k k=256");
}

TEST(DequantMatMulOp, VerifierErrors) {
  auto err = [](QuantFormat f, int64_t k, Shape xs, Shape ws) {
    return error_message([&] {
      Graph g;
      g.apply(dq(f, k), {g.input("x", xs), g.param("w", ws)});
    });
  };
  const std::string rb = err(QuantFormat::Q4_0, 64, Shape({1, 64}, DType::F32), Shape({8, 40}, DType::U8));
  EXPECT_THAT(rb, HasSubstr("dequant_matmul"));
  EXPECT_THAT(rb, HasSubstr("36"));  // 2 blocks of 18 bytes
  EXPECT_THAT(rb, HasSubstr("node"));
  EXPECT_THAT(err(QuantFormat::Q4_K, 128, Shape({1, 128}, DType::F32), Shape({8, 72}, DType::U8)),
              HasSubstr("multiple of the q4_k block size 256"));
  EXPECT_THAT(err(QuantFormat::F16, 48, Shape({1, 48}, DType::F32), Shape({8, 96}, DType::U8)),
              HasSubstr("multiple of the f16 block size 32"));
  EXPECT_THAT(err(QuantFormat::BF16, 64, Shape({1, 64}, DType::F32), Shape({8, 64}, DType::U8)), HasSubstr("128"));
  EXPECT_THAT(err(QuantFormat::Q8_0, 32, Shape({1, 32}, DType::I32), Shape({8, 34}, DType::U8)),
              HasSubstr("f32, f16 or bf16"));
  EXPECT_THAT(err(QuantFormat::Q8_0, 32, Shape({1, 64}, DType::F32), Shape({8, 34}, DType::U8)),
              HasSubstr("must be K = 32"));
  EXPECT_THAT(err(QuantFormat::Q8_0, 32, Shape({1, 32}, DType::F32), Shape({8, 34}, DType::I8)),
              HasSubstr("u8 (N, row_bytes)"));
  EXPECT_THAT(err(QuantFormat::Q8_0, 32, Shape({1, 32}, DType::F32), Shape({8, Dim::symbol("b")}, DType::U8)),
              HasSubstr("bytes per row"));
}

TEST(DequantMatMulOp, JsonRoundTrip) {
  Graph g;
  Value x = g.input("x", Shape({Dim::symbol("m"), Dim(64)}, DType::F32));
  Value y = g.apply(dq(QuantFormat::Q5_1, 64), {x, g.param("w", Shape({4, 48}, DType::U8))});
  g.add_output(y, "y");
  const Graph back = graph_from_json(graph_to_json(g));
  ASSERT_EQ(back.size(), g.size());
  EXPECT_TRUE(op_equal(back.node(y.node).op, g.node(y.node).op));
  EXPECT_FALSE(op_equal(back.node(y.node).op, dq(QuantFormat::Q5_0, 64)));
  EXPECT_THAT(g.to_text(), HasSubstr("dequant_matmul"));
}

TEST(DequantMatMulOp, SessionRunsF32AndF16) {
  const int64_t k = 256, n = 24;
  const auto w = random_weight(QuantFormat::Q6_K, n, k, 3);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g;
    Value x = g.input("x", Shape({Dim(2), Dim::symbol("m"), Dim(k)}, dt));
    g.add_output(g.apply(dq(QuantFormat::Q6_K, k), {x, g.param("w", Shape({n, 210}, DType::U8))}), "y");
    const Tensor xt = random_tensor(dt, {2, 3, k}, 11);
    const Tensor wt = Tensor::from_bytes(DType::U8, {n, 210}, w.data(), w.size());
    const Tensor y = run_cpu1(g, {{"x", xt}}, {{"w", wt}});
    const auto xd = to_doubles(xt);
    const std::vector<float> xf(xd.begin(), xd.end());
    const Exact e = exact(QuantFormat::Q6_K, xf, 6, k, w, n);
    // x is exact in its dtype; the Int8 path's bound plus the rounding of y to the dtype.
    double bound = 0;
    for (double b : e.int8_bound) bound = std::max(bound, b);
    const Tolerance tol{dt == DType::F32 ? 1e-5 : dt == DType::F16 ? 1e-3 : 8e-3, bound * 1.0001 + 1e-4};
    EXPECT_TRUE(all_close(y, {2, 3, n}, e.y, tol));
  }
}

TEST(DequantMatMulOp, WrongWeightBytesAtSetParam) {
  Graph g;
  Value x = g.input("x", Shape({1, 32}, DType::F32));
  g.add_output(g.apply(dq(QuantFormat::Q8_0, 32), {x, g.param("w", Shape({4, 34}, DType::U8))}));
  Session s(Device::Cpu);
  auto cg = s.compile(g);
  EXPECT_THAT(error_message([&] { cg.set_param("w", Tensor::zeros(DType::U8, {4, 33})); }), HasSubstr("set_param('w')"));
}

TEST(DequantMatMulOp, UnclaimingBackendGetsAClearError) {
  Graph g;
  Value x = g.input("x", Shape({1, 32}, DType::F32));
  g.add_output(g.apply(dq(QuantFormat::Q8_0, 32), {x, g.param("w", Shape({4, 34}, DType::U8))}));
  const passes::ClaimFn claims = [](const Graph&, const Node& n) { return !std::holds_alternative<ops::DequantMatMul>(n.op); };
  const std::string msg = error_message([&] { passes::legalize(g, claims, "Test"); });
  EXPECT_THAT(msg, HasSubstr("dequant_matmul"));
  EXPECT_THAT(msg, HasSubstr("Device::Cpu"));
}

}  // namespace
}  // namespace rlx
