#include <cmath>
#include <cstring>
#include <limits>

#include "support/test_util.h"

using namespace rlx;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::I8), 1u);
  EXPECT_EQ(dtype_size(DType::I16), 2u);
  EXPECT_EQ(dtype_size(DType::I32), 4u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::U8), 1u);
  EXPECT_EQ(dtype_size(DType::U32), 4u);
  EXPECT_EQ(dtype_size(DType::Bool), 1u);
  for (DType t : kAllDTypes) EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  auto msg = rlx::testing::error_message([] { dtype_from_name("float3"); });
  EXPECT_THAT(msg, ::testing::HasSubstr("float3"));
}

// f16 reference: exhaustive over every f16 bit pattern, converting to f32 and back must be identity
// (NaNs stay NaN), and the f32 value must equal the value computed from the bit fields.
TEST(DType, F16RoundTripAllBitPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_bits_to_f32(static_cast<uint16_t>(h));
    const uint32_t exp = (h >> 10) & 31, mant = h & 1023;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exp == 31) {
      if (mant) EXPECT_TRUE(std::isnan(f)) << h;
      else EXPECT_EQ(f, static_cast<float>(sign * INFINITY)) << h;
      continue;
    }
    const double ref = exp == 0 ? sign * std::ldexp(static_cast<double>(mant), -24)
                                : sign * std::ldexp(1.0 + mant / 1024.0, static_cast<int>(exp) - 15);
    ASSERT_EQ(static_cast<double>(f), ref) << h;
    ASSERT_EQ(f32_to_f16_bits(f), h) << h;
  }
}

TEST(DType, F16RoundsToNearestEven) {
  // 1 + 2^-11 is exactly halfway between 1 and 1+2^-10: ties to even -> 1.
  EXPECT_EQ(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even) -> up.
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Slightly above halfway rounds up.
  EXPECT_EQ(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);      // max
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);      // rounds to inf
  EXPECT_EQ(f32_to_f16_bits(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);   // smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);   // halfway to 0 -> even (0)
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(3.0f, -26)), 0x0001);   // above halfway -> 1
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(NAN))));
}

TEST(DType, Bf16RoundsToNearestEven) {
  auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
  auto from = [](uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; };
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(from(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16_bits(from(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16_bits(from(0x3f808001u)), 0x3f81);  // above tie
  EXPECT_EQ(bf16_bits_to_f32(0x3f80), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(NAN))));
  EXPECT_EQ(f32_to_bf16_bits(from(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  (void)bits;
}

TEST(Tensor, TypedAccessAndCast) {
  std::vector<float> v{1.5f, -2.5f, 3.0f, 0.0f};
  Tensor t = Tensor::f32({2, 2}, v);
  EXPECT_EQ(t.numel(), 4);
  EXPECT_EQ(t.nbytes(), 16u);
  EXPECT_EQ(t.data<float>()[1], -2.5f);
  auto msg = rlx::testing::error_message([&] { (void)t.data<int64_t>(); });
  EXPECT_THAT(msg, ::testing::HasSubstr("f32"));
  Tensor i = t.cast(DType::I32);
  EXPECT_EQ(i.data<int32_t>()[0], 1);
  EXPECT_EQ(i.data<int32_t>()[1], -2);  // truncation toward zero
  Tensor b = t.cast(DType::Bool);
  EXPECT_EQ(b.data<uint8_t>()[3], 0);
  EXPECT_EQ(b.data<uint8_t>()[0], 1);
  Tensor h = t.cast(DType::F16);
  EXPECT_EQ(h.to_f32(), v);
}

TEST(Tensor, BorrowSharesMemoryAndReshapeChecks) {
  std::vector<int64_t> buf{1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::borrow(DType::I64, {2, 3}, buf.data());
  EXPECT_TRUE(t.is_borrowed());
  t.data<int64_t>()[0] = 42;
  EXPECT_EQ(buf[0], 42);
  Tensor r = t.reshaped({3, -1});
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_THAT(rlx::testing::error_message([&] { t.reshaped({4, -1}); }), ::testing::HasSubstr("cannot infer"));
  EXPECT_THAT(rlx::testing::error_message([&] { t.reshaped({-1, -1}); }), ::testing::HasSubstr("more than one -1"));
  EXPECT_THAT(rlx::testing::error_message([&] { Tensor::f32({3}, std::vector<float>{1, 2}); }),
              ::testing::HasSubstr("bytes"));
  EXPECT_THAT(rlx::testing::error_message([&] { Tensor::empty(DType::F32, {2, -1}); }), ::testing::HasSubstr("negative"));
}

TEST(Tensor, ZeroSize) {
  Tensor t = Tensor::empty(DType::F32, {0, 3});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.to_f32().empty());
  EXPECT_THAT(t.summary(), ::testing::HasSubstr("empty"));
}
