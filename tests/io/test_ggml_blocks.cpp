// ggml block formats: dequantization of hand-built blocks checked bit for bit against values
// worked out from the layout description (src/quant/ggml_blocks.h), and quantize -> dequantize
// round trips of random data against the error bound of each scheme.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "quant/ggml_blocks.h"
#include "rlx/gguf.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(b.data() + at, &v, 2); }

std::vector<float> deq(GgmlType t, const std::vector<uint8_t>& b) { return ggml_dequantize(t, b); }

TEST(GgmlBlocks, TypeTable) {
  EXPECT_EQ(ggml_type_info(GgmlType::Q4_0).block_bytes, 18);
  EXPECT_EQ(ggml_type_info(GgmlType::Q4_1).block_bytes, 20);
  EXPECT_EQ(ggml_type_info(GgmlType::Q5_0).block_bytes, 22);
  EXPECT_EQ(ggml_type_info(GgmlType::Q5_1).block_bytes, 24);
  EXPECT_EQ(ggml_type_info(GgmlType::Q8_0).block_bytes, 34);
  EXPECT_EQ(ggml_type_info(GgmlType::Q4_K).block_bytes, 144);
  EXPECT_EQ(ggml_type_info(GgmlType::Q5_K).block_bytes, 176);
  EXPECT_EQ(ggml_type_info(GgmlType::Q6_K).block_bytes, 210);
  EXPECT_EQ(ggml_type_info(GgmlType::Q6_K).block_elements, 256);
  EXPECT_EQ(ggml_type_info(GgmlType::BF16).block_bytes, 2);
  EXPECT_EQ(ggml_type_info(4u), nullptr);  // Q4_2: removed from the format
  EXPECT_EQ(ggml_type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_THAT(testing::error_message([] { ggml_type_from_name("q9"); }), HasSubstr("Q6_K"));
  EXPECT_EQ(ggml_nbytes(GgmlType::Q4_K, 512, "t"), 288);
  EXPECT_EQ(ggml_type_of(DType::BF16), GgmlType::BF16);
  EXPECT_EQ(ggml_type_of(DType::U8), std::nullopt);
  EXPECT_EQ(dtype_of_ggml(GgmlType::I16), DType::I16);
  EXPECT_EQ(dtype_of_ggml(GgmlType::Q4_0), std::nullopt);
  EXPECT_THAT(testing::error_message([] { ggml_nbytes(GgmlType::Q4_0, 33, "w"); }), HasSubstr("whole number"));
}

// ---- bit-exact dequantization of hand-built blocks ---------------------------------------

TEST(GgmlBlocks, Q4_0ByHand) {
  std::vector<uint8_t> b(18, 0x88);  // every nibble 8: value 0
  put16(b, 0, 0x3800);               // d = 0.5
  b[2] = 0x3A;                       // value 0: 10 -> (10-8)*0.5; value 16: 3 -> (3-8)*0.5
  b[2 + 15] = 0xF0;                  // value 15: 0 -> -4; value 31: 15 -> 3.5
  std::vector<float> want(32, 0.0f);
  want[0] = 1.0f, want[16] = -2.5f, want[15] = -4.0f, want[31] = 3.5f;
  EXPECT_EQ(deq(GgmlType::Q4_0, b), want);
}

TEST(GgmlBlocks, Q4_1ByHand) {
  std::vector<uint8_t> b(20, 0);
  put16(b, 0, 0x3800);  // d = 0.5
  put16(b, 2, 0xBC00);  // m = -1
  b[4] = 0x3A;          // value 0: 10*0.5-1; value 16: 3*0.5-1
  std::vector<float> want(32, -1.0f);
  want[0] = 4.0f, want[16] = 0.5f;
  EXPECT_EQ(deq(GgmlType::Q4_1, b), want);
}

TEST(GgmlBlocks, Q5_0ByHand) {
  std::vector<uint8_t> b(22, 0);
  put16(b, 0, 0x3400);          // d = 0.25
  b[2] = 0x01, b[4] = 0x02;     // qh = bits 0 and 17
  b[6] = 0x3A;                  // value 0: 10|16 = 26 -> 10*0.25; value 16: 3 -> -13*0.25
  b[7] = 0x5F;                  // value 1: 15 -> -0.25; value 17: 5|16 = 21 -> 5*0.25
  std::vector<float> want(32, -4.0f);  // q = 0: -16 * 0.25
  want[0] = 2.5f, want[16] = -3.25f, want[1] = -0.25f, want[17] = 1.25f;
  EXPECT_EQ(deq(GgmlType::Q5_0, b), want);
}

TEST(GgmlBlocks, Q5_1ByHand) {
  std::vector<uint8_t> b(24, 0);
  put16(b, 0, 0x3800);  // d = 0.5
  put16(b, 2, 0x3C00);  // m = 1
  b[7] = 0x80;          // qh bit 31
  b[8 + 15] = 0x1F;     // value 15: 15 -> 8.5; value 31: 1|16 = 17 -> 9.5
  std::vector<float> want(32, 1.0f);
  want[15] = 8.5f, want[31] = 9.5f;
  EXPECT_EQ(deq(GgmlType::Q5_1, b), want);
}

TEST(GgmlBlocks, Q8_0ByHand) {
  std::vector<uint8_t> b(34, 0);
  put16(b, 0, 0x4000);  // d = 2
  b[2] = 0x81;          // -127
  b[2 + 31] = 5;
  std::vector<float> want(32, 0.0f);
  want[0] = -254.0f, want[31] = 10.0f;
  EXPECT_EQ(deq(GgmlType::Q8_0, b), want);
}

// Q4_K / Q5_K scales: sub-block 0 has scale 2, min 3 (low 6 bits of bytes 0 and 4); sub-block 5
// has scale 37 = 0b10'0101 and min 19 = 0b01'0011: low nibbles in byte 9 (0x35), high bits in
// bits 6-7 of bytes 1 (scale: 2 -> 0x80) and 5 (min: 1 -> 0x40). Every other scale and min is 0.
constexpr uint8_t kKScales[12] = {0x02, 0x80, 0, 0, 0x03, 0x40, 0, 0, 0, 0x35, 0, 0};

TEST(GgmlBlocks, Q4_KByHand) {
  std::vector<uint8_t> b(144, 0);
  put16(b, 0, 0x3C00);  // d = 1
  put16(b, 2, 0x3800);  // dmin = 0.5
  std::memcpy(b.data() + 4, kKScales, 12);
  uint8_t* qs = b.data() + 16;
  qs[0] = 0x07;        // sub-block 0 (chunk 0, low nibble), value 0: 1*2*7 - 0.5*3
  qs[64 + 3] = 0xA0;   // sub-block 5 (chunk 2, high nibble), value 3: 1*37*10 - 0.5*19
  std::vector<float> want(256, 0.0f);
  for (int l = 0; l < 32; ++l) want[l] = -1.5f, want[160 + l] = -9.5f;
  want[0] = 12.5f;
  want[163] = 360.5f;
  EXPECT_EQ(deq(GgmlType::Q4_K, b), want);
}

TEST(GgmlBlocks, Q5_KByHand) {
  std::vector<uint8_t> b(176, 0);
  put16(b, 0, 0x3C00);
  put16(b, 2, 0x3800);
  std::memcpy(b.data() + 4, kKScales, 12);
  uint8_t* qh = b.data() + 16;
  uint8_t* qs = b.data() + 48;
  qs[0] = 0x07, qh[0] = 0x01;       // sub-block 0 value 0: 7|16 = 23 -> 2*23 - 1.5
  qh[2] = 0x01;                     // sub-block 0 value 2: 0|16 -> 2*16 - 1.5
  qs[64 + 3] = 0xA0, qh[3] = 0x20;  // sub-block 5 value 3: 10|16 = 26 -> 37*26 - 9.5
  std::vector<float> want(256, 0.0f);
  for (int l = 0; l < 32; ++l) want[l] = -1.5f, want[160 + l] = -9.5f;
  want[0] = 44.5f, want[2] = 30.5f, want[163] = 952.5f;
  EXPECT_EQ(deq(GgmlType::Q5_K, b), want);
}

TEST(GgmlBlocks, Q6_KByHand) {
  std::vector<uint8_t> b(210, 0);
  uint8_t* ql = b.data();
  uint8_t* qh = b.data() + 128;
  auto* sc = reinterpret_cast<int8_t*>(b.data() + 192);
  put16(b, 208, 0x3800);  // d = 0.5 (the last field)
  sc[0] = 2, sc[4] = 1, sc[14] = -3;
  // Value 0 (half 0, k 0, l 0): low 4 bits in the low nibble of ql[0], high 2 in bits 0-1 of
  // qh[0]: 15 | 3 << 4 = 63 -> 31 * 0.5 * 2.
  ql[0] = 0x0F, qh[0] = 0x03;
  // Value 229 = 128 + 32*3 + 5 (half 1, k 3, l 5): the high nibble of ql[64 + 32 + 5], bits 6-7
  // of qh[32 + 5], scale 8 + 6 + 0 = 14: 9 | 2 << 4 = 41 -> 9 * 0.5 * -3.
  ql[101] = 0x90, qh[37] = 0x80;
  // Every other value is q = 0 -> -32: -32 * 0.5 * scale (0 where the scale is 0).
  std::vector<float> want(256, 0.0f);
  for (int i = 0; i < 16; ++i) want[i] = -32.0f, want[64 + i] = -16.0f, want[224 + i] = 48.0f;
  want[0] = 31.0f;
  want[229] = -13.5f;
  EXPECT_EQ(deq(GgmlType::Q6_K, b), want);
}

TEST(GgmlBlocks, Q2_KByHand) {
  std::vector<uint8_t> b(84, 0);
  uint8_t* sc = b.data();  // per 16-value sub-block: low nibble scale, high nibble min
  uint8_t* qs = b.data() + 16;
  put16(b, 80, 0x3800);  // d = 0.5
  put16(b, 82, 0x3C00);  // dmin = 1
  sc[0] = 0x23, sc[2] = 0x11, sc[4] = 0x02, sc[6] = 0x30, sc[9] = 0x15, sc[14] = 0x4F;
  qs[0] = 0xE4;       // values 0, 32, 64, 96 (shifts 0, 2, 4, 6): q = 0, 1, 2, 3
  qs[32 + 5] = 0x80;  // value 128 + 96 + 5 = 229: q = 2
  std::vector<float> want(256, 0.0f);
  for (int i = 0; i < 16; ++i) {
    want[i] = -2.0f;         // 0.5*3*0 - 1*2
    want[32 + i] = -1.0f;    // 0.5*1*0 - 1*1
    want[96 + i] = -3.0f;    // 0 - 3
    want[144 + i] = -1.0f;   // 0.5*5*0 - 1*1
    want[224 + i] = -4.0f;   // 0.5*15*0 - 4
  }
  want[32] = -0.5f;  // 0.5*1*1 - 1
  want[64] = 2.0f;   // 0.5*2*2 - 0
  want[229] = 11.0f; // 0.5*15*2 - 4
  EXPECT_EQ(deq(GgmlType::Q2_K, b), want);
}

TEST(GgmlBlocks, Q3_KByHand) {
  std::vector<uint8_t> b(110, 0);
  uint8_t* hmask = b.data();
  uint8_t* qs = b.data() + 32;
  uint8_t* sc = b.data() + 96;
  put16(b, 108, 0x3800);  // d = 0.5
  std::memset(hmask, 0xFF, 32);  // every high bit set: q = the 2-bit value
  // Scale 0 = 34 - 32 = 2: low 4 bits (2) in the low nibble of byte 0, high 2 bits (2) in byte 8
  // bits 0-1. Scale 13 = 5 - 32 = -27: low 4 bits in the high nibble of byte 5. The other scales
  // are -32, over values that are 0.
  sc[0] = 0x02, sc[8] = 0x02, sc[5] = 0x50;
  qs[0] = 0x03;                   // value 0: q = 3 -> 0.5*2*3
  qs[1] = 0x01, hmask[1] = 0xFE;  // value 1: q = 1 - 4 -> 0.5*2*-3
  qs[48] = 0x20, hmask[16] = 0xBF;  // value 128 + 64 + 16 = 208 (sub-block 13): q = 2 - 4 -> 0.5*-27*-2
  std::vector<float> want(256, 0.0f);
  want[0] = 3.0f, want[1] = -3.0f, want[208] = 27.0f;
  EXPECT_EQ(deq(GgmlType::Q3_K, b), want);
}

TEST(GgmlBlocks, PlainTypes) {
  const std::vector<float> x = {1.5f, -2.0f, 0.099975586f, 65504.0f};
  EXPECT_EQ(ggml_dequantize(GgmlType::F32, ggml_quantize(GgmlType::F32, x)), x);
  EXPECT_EQ(ggml_dequantize(GgmlType::F16, ggml_quantize(GgmlType::F16, x)), x);  // all exact in f16
  const auto bf = ggml_quantize(GgmlType::BF16, std::vector<float>{1.0f, -3.0f});
  EXPECT_EQ(bf, (std::vector<uint8_t>{0x80, 0x3F, 0x40, 0xC0}));
}

// ---- round trips ---------------------------------------------------------------------------

// Gaussian values whose scale changes per 32-value block (1e-3 .. 1e3), with a few outliers.
std::vector<float> test_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const float scale = std::pow(10.0f, static_cast<float>(static_cast<int>((i / 32) % 7) - 3));
    x[i] = normal(rng) * scale;
    if (rng() % 97 == 0) x[i] *= 6;
  }
  return x;
}

float absmax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// The per-value error bound of each scheme (f16 scale rounding adds about amax * 2^-10).
std::vector<float> error_bounds(GgmlType t, const std::vector<float>& x) {
  const int n = static_cast<int>(x.size());
  std::vector<float> bound(x.size());
  const int blk = static_cast<int>(ggml_type_info(t).block_elements);
  for (int b = 0; b < n; b += blk) {
    const float* v = x.data() + b;
    const float amax = absmax(v, blk);
    const float lo = *std::min_element(v, v + blk), hi = *std::max_element(v, v + blk);
    const float slack = amax * 0x1p-9f + 1e-30f;
    if (t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q5_0 || t == GgmlType::Q4_1 ||
        t == GgmlType::Q5_1) {
      float e = 0;
      if (t == GgmlType::Q8_0) e = 0.5f * amax / 127;
      if (t == GgmlType::Q4_0) e = amax / 8;   // the value opposite the largest one may clamp: one step
      if (t == GgmlType::Q5_0) e = amax / 16;
      if (t == GgmlType::Q4_1) e = 0.5f * (hi - lo) / 15;
      if (t == GgmlType::Q5_1) e = 0.5f * (hi - lo) / 31;
      std::fill(bound.begin() + b, bound.begin() + b + blk, e + slack);
    } else if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) {
      // Half a step: step = d * sc <= span + d, span = (hi + off) / levels, off <= -lo + dmin.
      const float levels = t == GgmlType::Q4_K ? 15 : 31;
      float max_off = 0, max_span = 0;
      for (int s = 0; s < 8; ++s) max_off = std::max(max_off, -std::min(0.0f, *std::min_element(v + 32 * s, v + 32 * s + 32)));
      const float dmin = max_off / 63;
      for (int s = 0; s < 8; ++s) {
        const float slo = std::min(0.0f, *std::min_element(v + 32 * s, v + 32 * s + 32));
        const float shi = *std::max_element(v + 32 * s, v + 32 * s + 32);
        max_span = std::max(max_span, (shi - slo + dmin) / levels);
      }
      for (int s = 0; s < 8; ++s) {
        const float slo = std::min(0.0f, *std::min_element(v + 32 * s, v + 32 * s + 32));
        const float shi = *std::max_element(v + 32 * s, v + 32 * s + 32);
        const float e = 0.5f * ((shi - slo + dmin) / levels + max_span / 63);
        std::fill(bound.begin() + b + 32 * s, bound.begin() + b + 32 * s + 32, e * 1.01f + slack);
      }
    } else if (t == GgmlType::Q6_K) {
      // One step at most (the value opposite the largest may clamp): |step| <= amax_j/32 + d.
      float max_want = 0;
      for (int j = 0; j < 16; ++j) max_want = std::max(max_want, absmax(v + 16 * j, 16) / 32);
      for (int j = 0; j < 16; ++j) {
        const float e = absmax(v + 16 * j, 16) / 32 + max_want / 127;
        std::fill(bound.begin() + b + 16 * j, bound.begin() + b + 16 * j + 16, e * 1.01f + slack);
      }
    }
  }
  return bound;
}

struct RoundTrip {
  GgmlType type;
  double max_rel_rms;  // RMS error / RMS value over blocks of one scale (gaussian data)
};

class GgmlRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(GgmlRoundTrip, ErrorWithinTheSchemesBound) {
  const RoundTrip rt = GetParam();
  const size_t n = 256 * 28;  // every block scale appears in several super-blocks
  const std::vector<float> x = test_values(n, 7 + static_cast<uint32_t>(rt.type));
  const std::vector<uint8_t> q = ggml_quantize(rt.type, x);
  ASSERT_EQ(q.size(), static_cast<size_t>(ggml_nbytes(rt.type, static_cast<int64_t>(n), "x")));
  const std::vector<float> y = ggml_dequantize(rt.type, q);
  ASSERT_EQ(y.size(), n);
  const std::vector<float> bound = error_bounds(rt.type, x);
  size_t bad = 0, worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const float e = std::fabs(y[i] - x[i]);
    if (!(e <= bound[i])) ++bad;
    if (e / bound[i] > std::fabs(y[worst] - x[worst]) / bound[worst]) worst = i;
  }
  EXPECT_EQ(bad, 0u) << ggml_type_name(rt.type) << ": worst value " << worst << " x=" << x[worst]
                     << " y=" << y[worst] << " bound=" << bound[worst];
  // Relative RMS error on unit-scale data (no outliers), the figure of merit of each scheme.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> g(256 * 16);
  for (float& v : g) v = normal(rng);
  const std::vector<float> gy = ggml_dequantize(rt.type, ggml_quantize(rt.type, g));
  double se = 0, sx = 0;
  for (size_t i = 0; i < g.size(); ++i) se += (gy[i] - g[i]) * (gy[i] - g[i]), sx += g[i] * g[i];
  const double rel = std::sqrt(se / sx);
  EXPECT_LE(rel, rt.max_rel_rms) << ggml_type_name(rt.type);
  EXPECT_GT(rel, rt.max_rel_rms / 4) << ggml_type_name(rt.type) << ": suspiciously exact";
}

INSTANTIATE_TEST_SUITE_P(Schemes, GgmlRoundTrip,
                         ::testing::Values(RoundTrip{GgmlType::Q4_0, 0.10}, RoundTrip{GgmlType::Q4_1, 0.095},
                                           RoundTrip{GgmlType::Q5_0, 0.05}, RoundTrip{GgmlType::Q5_1, 0.045},
                                           RoundTrip{GgmlType::Q8_0, 0.0065}, RoundTrip{GgmlType::Q4_K, 0.095},
                                           RoundTrip{GgmlType::Q5_K, 0.047}, RoundTrip{GgmlType::Q6_K, 0.023}),
                         [](const auto& info) { return std::string(ggml_type_name(info.param.type)); });

TEST(GgmlBlocks, ZeroAndConstantBlocks) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K}) {
    const std::vector<float> zeros(256, 0.0f);
    EXPECT_EQ(ggml_dequantize(t, ggml_quantize(t, zeros)), zeros) << ggml_type_name(t);
    const std::vector<float> ones(256, -1.0f);
    for (float v : ggml_dequantize(t, ggml_quantize(t, ones))) ASSERT_NEAR(v, -1.0f, 2e-3f) << ggml_type_name(t);
  }
}

TEST(GgmlBlocks, QuantizersRejectWhatTheyCannotStore) {
  std::vector<float> x(256, 1.0f);
  x[37] = std::nanf("");
  EXPECT_THAT(testing::error_message([&] { ggml_quantize(GgmlType::Q4_K, x); }), HasSubstr("value 37 is NaN"));
  x[37] = 1e9f;  // Q8_0 scale 1e9/127 > 65504
  EXPECT_THAT(testing::error_message([&] { ggml_quantize(GgmlType::Q8_0, x); }), HasSubstr("beyond the f16 range"));
  // 16-bit floats: a finite value that would round to infinity is refused, not stored as inf.
  x[37] = 70000.0f;
  EXPECT_THAT(testing::error_message([&] { ggml_quantize(GgmlType::F16, x); }),
              AllOf(HasSubstr("value 37"), HasSubstr("beyond the f16 range")));
  EXPECT_NO_THROW(ggml_quantize(GgmlType::BF16, x));
  x[37] = 3.4028235e38f;  // FLT_MAX rounds past bf16's largest finite value
  EXPECT_THAT(testing::error_message([&] { ggml_quantize(GgmlType::BF16, x); }), HasSubstr("beyond the bf16 range"));
  x[37] = 65504.0f;  // f16's largest finite value itself is kept
  EXPECT_EQ(ggml_dequantize(GgmlType::F16, ggml_quantize(GgmlType::F16, x))[37], 65504.0f);
  EXPECT_THAT(testing::error_message([&] { ggml_quantize(GgmlType::Q4_0, std::vector<float>(31, 0.0f)); }),
              HasSubstr("whole number"));
  EXPECT_THAT(testing::error_message([&] { ggml_quantize(GgmlType::Q3_K, std::vector<float>(256, 0.0f)); }),
              HasSubstr("cannot quantize to ggml type Q3_K"));
  EXPECT_THAT(testing::error_message([&] { ggml_quantize(GgmlType::Q2_K, std::vector<float>(256, 0.0f)); }),
              HasSubstr("cannot quantize to ggml type Q2_K"));
  EXPECT_THAT(testing::error_message([&] { ggml_dequantize(GgmlType::IQ4_XS, std::vector<uint8_t>(136)); }),
              HasSubstr("cannot dequantize ggml type IQ4_XS"));
  EXPECT_THAT(testing::error_message([&] { ggml_dequantize(GgmlType::Q4_0, std::vector<uint8_t>(17)); }),
              HasSubstr("not a whole number of 18-byte blocks"));
}

}  // namespace
}  // namespace rlx
