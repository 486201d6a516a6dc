// The packed DequantMatMul weights (backends/cpu/quant_pack.h): the packed product against the
// exact product with the Int8 error bound (ops/dequant_test_util.h), the AVX2 and VNNI kernels
// bit-identical, padding rows, extreme blocks, and the CPU backend's use of the packed form
// (knob on and off, rebuilt after set_param).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/quant_matmul.h"
#include "backends/cpu/quant_pack.h"
#include "ops/dequant_test_util.h"
#include "rlx/session.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using namespace rlx::testing;
using namespace rlx::dqtest;

constexpr QuantFormat kPacked[] = {QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q8_0,
                                   QuantFormat::Q4_K, QuantFormat::Q5_K, QuantFormat::Q6_K};

std::vector<cpu::PackedKernel> kernels_here() {
  std::vector<cpu::PackedKernel> ks{cpu::PackedKernel::Avx2};
  if (cpu::quant_pack_vnni()) ks.push_back(cpu::PackedKernel::Vnni);
  return ks;
}

std::vector<float> packed_product(QuantFormat f, const std::vector<float>& x, int64_t m, int64_t k,
                                  const std::vector<uint8_t>& w, int64_t n, cpu::PackedKernel kernel) {
  std::vector<uint8_t> packed;
  cpu::quant_pack(f, w.data(), n, k, packed);
  EXPECT_EQ(static_cast<int64_t>(packed.size()), cpu::quant_packed_bytes(f, n, k));
  std::vector<float> y(static_cast<size_t>(m * n), -1e30f);
  cpu::dequant_matmul_packed(f, x.data(), m, k, packed.data(), n, y.data(), kernel);
  return y;
}

TEST(QuantPack, MatchesTheExactProductOnEveryKernel) {
  for (QuantFormat f : kPacked) {
    if (!cpu::quant_pack_format(f)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU: the packed kernels do not run";
    const bool kf = quant_block(f).elements == 256;
    // m: 1 (decode), every remainder after groups of 4 x rows, a prompt; n: whole tiles, a
    // padded tile (37 = 4 x 8 + 5), fewer rows than a tile.
    for (int64_t m : {1, 2, 3, 4, 7, 17}) {
      for (int64_t n : {16, 37, 3}) {
        for (int64_t k : {kf ? int64_t{256} : int64_t{32}, kf ? int64_t{768} : int64_t{544}}) {
          SCOPED_TRACE(std::string(enum_name(f)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                       " k=" + std::to_string(k));
          const auto x = normal(static_cast<size_t>(m * k), 300 + m + n);
          const auto w = random_weight(f, n, k, 9 + n);
          const Exact e = exact(f, x, m, k, w, n);
          std::vector<std::vector<float>> ys;
          for (cpu::PackedKernel kern : kernels_here()) {
            ys.push_back(packed_product(f, x, m, k, w, n, kern));
            EXPECT_TRUE(close(ys.back(), e, true));
          }
          // Same integers, same f32 operations: the VNNI kernel gives the AVX2 kernel's bits.
          if (ys.size() == 2) {
            EXPECT_EQ(0, std::memcmp(ys[0].data(), ys[1].data(), ys[0].size() * sizeof(float)));
          }
        }
      }
    }
  }
}

TEST(QuantPack, PaddingRowsAreZeroAndStayOutOfY) {
  const QuantFormat f = QuantFormat::Q4_K;
  if (!cpu::quant_pack_format(f)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  const int64_t n = 5, k = 256, m = 2;
  const auto w = random_weight(f, n, k, 4);
  std::vector<uint8_t> packed;
  cpu::quant_pack(f, w.data(), n, k, packed);
  ASSERT_EQ(packed.size(), size_t{1184});
  // Rows 5..7 of the tile: zero values, scales, mins, d and dmin.
  for (int u = 0; u < 8; ++u)
    for (int c = 0; c < 4; ++c)
      for (int r = 5; r < 8; ++r)
        for (int b = 0; b < 4; ++b) EXPECT_EQ(packed[static_cast<size_t>(128 * u + 32 * c + 4 * r + b)], 0);
  for (int r = 5; r < 8; ++r) {
    EXPECT_EQ(packed[static_cast<size_t>(1024 + r)], 0);
    EXPECT_EQ(packed[static_cast<size_t>(1152 + 2 * r)], 0);
    EXPECT_EQ(packed[static_cast<size_t>(1168 + 2 * r)], 0);
  }
  // y has exactly n columns: the element after each row is not written.
  const auto x = normal(static_cast<size_t>(m * k), 5);
  std::vector<float> y(static_cast<size_t>(m * n + 1), 12345.0f);
  cpu::dequant_matmul_packed(f, x.data(), m, k, packed.data(), n, y.data());
  EXPECT_EQ(y.back(), 12345.0f);
  std::vector<float> yy(y.begin(), y.end() - 1);
  EXPECT_TRUE(close(yy, exact(f, x, m, k, w, n), true));
}

TEST(QuantPack, ExtremeBlocks) {
  // Largest integer sums: every 4/5/6-bit value at its maximum, Q4_K / Q5_K scales and mins of 63
  // (all bits set), Q6_K scales of -128, Q8_0 values of -128, x at +-127 steps; and a zero row.
  const int64_t k = 512, n = 9, m = 5;
  std::vector<float> x(static_cast<size_t>(m * k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 ? 1000.0f : -1000.0f);
  const uint16_t d = f32_to_f16_bits(0.01f);
  for (QuantFormat f : kPacked) {
    if (!cpu::quant_pack_format(f)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
    SCOPED_TRACE(enum_name(f));
    const QuantBlock blk = quant_block(f);
    std::vector<uint8_t> w(static_cast<size_t>(n * k / blk.elements * blk.bytes), f == QuantFormat::Q8_0 ? 0x80 : 0xFF);
    for (size_t b = 0; b < w.size(); b += static_cast<size_t>(blk.bytes)) {
      if (f == QuantFormat::Q6_K) {
        std::memset(w.data() + b + 192, 0x80, 16);
        std::memcpy(w.data() + b + 208, &d, 2);
        continue;
      }
      std::memcpy(w.data() + b, &d, 2);
      if (f != QuantFormat::Q4_0 && f != QuantFormat::Q8_0) std::memcpy(w.data() + b + 2, &d, 2);
    }
    std::memset(w.data() + 2 * (w.size() / n), 0, w.size() / n);  // row 2: all zero
    const Exact e = exact(f, x, m, k, w, n);
    for (cpu::PackedKernel kern : kernels_here()) EXPECT_TRUE(close(packed_product(f, x, m, k, w, n, kern), e, true));
  }
}

TEST(QuantPack, NonFiniteXGivesNaN) {
  if (!cpu::quant_pack_format(QuantFormat::Q4_0)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  const int64_t k = 64, n = 3;
  std::vector<float> x(static_cast<size_t>(k), 1.0f);
  x[40] = std::numeric_limits<float>::infinity();
  for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q8_0}) {
    const auto y = packed_product(f, x, 1, k, random_weight(f, n, k, 2), n, cpu::PackedKernel::Auto);
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << enum_name(f);
  }
}

TEST(QuantPack, Errors) {
  std::vector<uint8_t> out;
  EXPECT_THAT(error_message([&] { cpu::quant_pack(QuantFormat::Q3_K, nullptr, 1, 256, out); }),
              HasSubstr("quant_pack: q3_k has no packed form"));
  EXPECT_THAT(error_message([&] { cpu::quant_packed_bytes(QuantFormat::Q4_K, 8, 128); }),
              HasSubstr("k = 128 is not a positive multiple"));
  if (cpu::quant_pack_format(QuantFormat::Q4_0) && !cpu::quant_pack_vnni()) {
    float x[32] = {}, y[1];
    uint8_t p[144] = {};
    EXPECT_THAT(error_message([&] {
                  cpu::dequant_matmul_packed(QuantFormat::Q4_0, x, 1, 32, p, 1, y, cpu::PackedKernel::Vnni);
                }),
                HasSubstr("AVX-512 VNNI"));
  }
}

// The CPU backend packs a Param weight once per params generation: knob on and off each give
// their kernel's bits (within the Int8 bound), and set_param between runs gives a fresh
// compile's result.
TEST(QuantPack, SessionPacksParamsAndRepacksAfterSetParam) {
  const QuantFormat f = QuantFormat::Q4_K;
  const int64_t k = 512, n = 40, m = 3;
  const QuantBlock blk = quant_block(f);
  const int64_t row_bytes = k / blk.elements * blk.bytes;
  Graph g;
  Value x = g.input("x", Shape({m, k}, DType::F32));
  ops::DequantMatMul op;
  op.format = f;
  op.k = k;
  g.add_output(g.apply(op, {x, g.param("w", Shape({n, row_bytes}, DType::U8))}), "y");
  const auto xv = normal(static_cast<size_t>(m * k), 21);
  const Tensor xt = Tensor::from_bytes(DType::F32, {m, k}, xv.data(), xv.size() * sizeof(float));
  const auto w1 = random_weight(f, n, k, 31), w2 = random_weight(f, n, k, 32);
  auto wt = [&](const std::vector<uint8_t>& w) { return Tensor::from_bytes(DType::U8, {n, row_bytes}, w.data(), w.size()); };
  auto values = [](const Tensor& t) {
    const float* p = t.data<float>();
    return std::vector<float>(p, p + t.numel());
  };
  for (bool pack : {true, false}) {
    SCOPED_TRACE(pack ? "packed" : "ggml blocks");
    CompileOptions o;
    o.tuning.cpu_pack_quant = pack;
    Session s(Device::Cpu);
    auto cg = s.compile(g, o);
    cg.set_param("w", wt(w1));
    const Tensor y1 = cg.run({{"x", xt}}).at(0);
    EXPECT_TRUE(close(values(y1), exact(f, xv, m, k, w1, n), true));
    cg.set_param("w", wt(w2));
    const Tensor y2 = cg.run({{"x", xt}}).at(0);
    EXPECT_TRUE(close(values(y2), exact(f, xv, m, k, w2, n), true));
    // The path that ran: the packed kernel's bits, or the ggml-block kernel's.
    std::vector<float> want(static_cast<size_t>(m * n));
    if (pack) want = packed_product(f, xv, m, k, w2, n, cpu::PackedKernel::Auto);
    else cpu::dequant_matmul(cpu::DequantPath::Auto, f, xv.data(), m, k, w2.data(), n, want.data());
    EXPECT_EQ(0, std::memcmp(y2.raw(), want.data(), want.size() * sizeof(float)));
    auto fresh = s.compile(g, o);
    fresh.set_param("w", wt(w2));
    const Tensor y3 = fresh.run({{"x", xt}}).at(0);
    EXPECT_EQ(0, std::memcmp(y2.raw(), y3.raw(), static_cast<size_t>(m * n) * sizeof(float)));
  }
}

}  // namespace
}  // namespace rlx
