// ONNX tensors of the new element types (UINT16, UINT64, the float8 formats, FLOAT4E2M1,
// INT4/UINT4, INT2/UINT2): unpacking of packed raw_data and int32_data (two 4-bit or four 2-bit
// values a byte, the first in the low bits, odd counts padded), the size and range checks, and
// Cast (saturate, round_mode) / QuantizeLinear / DequantizeLinear on them against references
// written here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "onnx/onnx_builder.h"
#include "rlx/dtype_narrow.h"
#include "rlx/onnx.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
using TP = onnx::TensorProto;

// A model whose output y is initializer `t` (through Identity).
OnnxBuilder identity_of(const onnx::TensorProto& t, int64_t opset = 25) {
  OnnxBuilder b(opset, 11);
  b.output("y", t.data_type());
  *b.graph().add_initializer() = t;
  b.node("Identity", {t.name()}, {"y"});
  return b;
}

onnx::TensorProto proto(int32_t type, std::vector<int64_t> dims) {
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(type);
  for (int64_t d : dims) t.add_dims(d);
  return t;
}

Tensor imported(const onnx::TensorProto& t) { return testing::run_cpu1(testing::import_built(identity_of(t)), {}); }

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

TEST(OnnxNarrowTypes, PackedRawDataIsUnpacked) {
  // INT4 [5]: 7, -8, -1, 0, 3 -> bytes 0x87, 0x0f, 0x03 (the last high nibble is padding)
  onnx::TensorProto i4 = proto(22, {5});
  i4.set_raw_data(std::string("\x87\x0f\x03", 3));
  const Tensor a = imported(i4);
  EXPECT_EQ(a.dtype(), DType::I4);
  EXPECT_EQ(a.to_i64(), (std::vector<int64_t>{7, -8, -1, 0, 3}));
  // UINT4 in int32_data (one packed byte a value)
  onnx::TensorProto u4 = proto(21, {2, 2});
  u4.add_int32_data(0xf1);
  u4.add_int32_data(0x5a);
  EXPECT_EQ(imported(u4).to_i64(), (std::vector<int64_t>{1, 15, 10, 5}));
  // INT2 [7]: four a byte
  onnx::TensorProto i2 = proto(26, {7});
  i2.set_raw_data(std::string("\x39\x39", 2));  // 1, -2, -1, 0, 1, -2, -1
  EXPECT_EQ(imported(i2).to_i64(), (std::vector<int64_t>{1, -2, -1, 0, 1, -2, -1}));
  onnx::TensorProto u2 = proto(25, {7});
  u2.set_raw_data(std::string("\x39\x39", 2));
  EXPECT_EQ(imported(u2).to_i64(), (std::vector<int64_t>{1, 2, 3, 0, 1, 2, 3}));
  // FLOAT4E2M1: nibbles are the codes
  onnx::TensorProto f4 = proto(23, {3});
  f4.set_raw_data(std::string("\xe2\x07", 2));
  EXPECT_EQ(imported(f4).to_f64(), (std::vector<double>{1, -4, 6}));
}

TEST(OnnxNarrowTypes, ByteTypesFromEveryField) {
  onnx::TensorProto f8 = proto(17, {3});
  for (int v : {0x7e, 0x80, 0x38}) f8.add_int32_data(v);  // 448, -0, 1
  const Tensor a = imported(f8);
  EXPECT_EQ(a.dtype(), DType::F8E4M3FN);
  EXPECT_EQ(bytes_of(a), (std::vector<uint8_t>{0x7e, 0x80, 0x38}));
  onnx::TensorProto e8 = proto(24, {2});
  e8.set_raw_data(std::string("\x7f\x80", 2));
  EXPECT_EQ(imported(e8).to_f64(), (std::vector<double>{1, 2}));
  onnx::TensorProto u16 = proto(TP::UINT16, {2});
  u16.add_int32_data(65535);
  u16.add_int32_data(3);
  EXPECT_EQ(imported(u16).to_i64(), (std::vector<int64_t>{65535, 3}));
  onnx::TensorProto u64 = proto(TP::UINT64, {2});
  u64.add_uint64_data(~uint64_t{0});
  u64.add_uint64_data(5);
  const Tensor c = imported(u64);
  EXPECT_EQ(c.dtype(), DType::U64);
  EXPECT_EQ(c.data<uint64_t>()[0], ~uint64_t{0});
  EXPECT_EQ(c.data<uint64_t>()[1], 5u);
}

TEST(OnnxNarrowTypes, BadSizesAndValuesAreErrors) {
  onnx::TensorProto i4 = proto(22, {5});
  i4.set_raw_data(std::string("\x87\x0f", 2));  // needs 3 bytes
  EXPECT_THAT(testing::error_message([&] { imported(i4); }), HasSubstr("need 3"));
  onnx::TensorProto u4 = proto(21, {4});
  u4.add_int32_data(0x11);  // needs 2 packed bytes
  EXPECT_THAT(testing::error_message([&] { imported(u4); }), HasSubstr("packed bytes"));
  onnx::TensorProto f8 = proto(19, {1});
  f8.add_int32_data(256);
  EXPECT_THAT(testing::error_message([&] { imported(f8); }), HasSubstr("does not fit"));
  onnx::TensorProto u16 = proto(TP::UINT16, {1});
  u16.add_int32_data(65536);
  EXPECT_THAT(testing::error_message([&] { imported(u16); }), HasSubstr("does not fit"));
  onnx::TensorProto cx = proto(TP::COMPLEX64, {1});
  EXPECT_THAT(testing::error_message([&] { imported(cx); }), HasSubstr("COMPLEX64 is not supported"));
}

// ---- Cast / QuantizeLinear / DequantizeLinear --------------------------------------------------
Tensor run_model(OnnxBuilder& b, const std::vector<std::pair<std::string, Tensor>>& feeds) {
  return testing::run_cpu1(testing::import_built(b), feeds);
}

TEST(OnnxNarrowTypes, CastHonoursSaturateAndRoundMode) {
  const Tensor x = Tensor::f32({4}, std::vector<float>{1e6f, -INFINITY, 1.5f, 3.0f});
  for (int64_t sat : {1, 0}) {
    OnnxBuilder b(25, 11);
    b.input("x", TP::FLOAT, {4}).output("y", 17);
    auto& n = b.node("Cast", {"x"}, {"y"});
    set_attr(n, "to", int64_t{17});
    set_attr(n, "saturate", sat);
    const Tensor y = run_model(b, {{"x", x}});
    const std::vector<uint8_t> want = sat ? std::vector<uint8_t>{0x7e, 0xfe, 0x3c, 0x44}
                                          : std::vector<uint8_t>{0x7f, 0xff, 0x3c, 0x44};
    EXPECT_EQ(bytes_of(y), want) << "saturate " << sat;
  }
  for (const auto& [mode, want] : std::vector<std::pair<std::string, std::vector<uint8_t>>>{
           {"up", {127 + 20, 0xfe, 128, 129}}, {"down", {127 + 19, 0xfe, 127, 128}}, {"nearest", {127 + 20, 0xfe, 128, 129}}}) {
    OnnxBuilder b(25, 11);
    b.input("x", TP::FLOAT, {4}).output("y", 24);
    auto& n = b.node("Cast", {"x"}, {"y"});
    set_attr(n, "to", int64_t{24});
    set_attr(n, "round_mode", mode);
    EXPECT_EQ(bytes_of(run_model(b, {{"x", Tensor::f32({4}, std::vector<float>{1e6f, -INFINITY, 1.5f, 3.0f})}})), want)
        << mode;
  }
  OnnxBuilder bad(25, 11);
  bad.input("x", TP::FLOAT, {4}).output("y", 24);
  auto& n = bad.node("Cast", {"x"}, {"y"});
  set_attr(n, "to", int64_t{24});
  set_attr(n, "round_mode", std::string("sideways"));
  EXPECT_THAT(testing::error_message([&] { testing::import_built(bad); }), HasSubstr("round_mode 'sideways'"));
}

// QuantizeLinear to INT4 per axis and blocked: round half to even, add the zero point, clamp.
TEST(OnnxNarrowTypes, QuantizeToInt4PerAxisAndBlocked) {
  const std::vector<float> xv = {-20, -3.5, -2.5, 0, 2.5, 3.5, 7, 30};
  for (int64_t block : {0, 2}) {
    OnnxBuilder b(25, 11);
    b.input("x", TP::FLOAT, {2, 4}).output("y", 22);
    const Tensor scale = block ? Tensor::f32({2, 2}, std::vector<float>{1, 2, 0.5f, 1})
                               : Tensor::f32({4}, std::vector<float>{1, 2, 0.5f, 1});
    Tensor zp = Tensor::empty(DType::I4, block ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{4});
    const uint8_t zb[] = {0, 1, static_cast<uint8_t>(-1), 2};
    std::memcpy(zp.raw(), zb, 4);
    b.initializer("s", scale).initializer("z", zp);
    auto& n = b.node("QuantizeLinear", {"x", "s", "z"}, {"y"});
    set_attr(n, "axis", int64_t{1});
    if (block) set_attr(n, "block_size", int64_t{2});
    const Tensor y = run_model(b, {{"x", Tensor::f32({2, 4}, xv)}});
    std::vector<int64_t> want;
    for (int r = 0; r < 2; ++r)
      for (int col = 0; col < 4; ++col) {
        const int k = block ? r * 2 + col / 2 : col;
        const float s = scale.to_f32()[static_cast<size_t>(k)];
        const int64_t z = static_cast<int8_t>(zb[k]);
        const double q = std::nearbyint(static_cast<double>(xv[static_cast<size_t>(r * 4 + col)] / s)) + static_cast<double>(z);
        want.push_back(static_cast<int64_t>(std::min(7.0, std::max(-8.0, q))));
      }
    EXPECT_EQ(y.dtype(), DType::I4);
    EXPECT_EQ(y.to_i64(), want) << "block " << block;
  }
}

TEST(OnnxNarrowTypes, QuantizeToFloat8AndBack) {
  const std::vector<float> xv = {1, -1000, 3.3f, 0.001f};
  for (int64_t sat : {1, 0}) {
    OnnxBuilder b(25, 11);
    b.input("x", TP::FLOAT, {4}).output("y", TP::FLOAT);
    b.initializer("s", Tensor::f32({}, std::vector<float>{0.5f}));
    Tensor zp = Tensor::empty(DType::F8E4M3FN, {});
    b.initializer("z", zp);
    set_attr(b.node("QuantizeLinear", {"x", "s", "z"}, {"q"}), "saturate", sat);
    b.node("DequantizeLinear", {"q", "s", "z"}, {"y"});
    const auto y = run_model(b, {{"x", Tensor::f32({4}, xv)}}).to_f64();
    for (size_t i = 0; i < xv.size(); ++i) {
      const uint8_t code = narrow_float_bits(DType::F8E4M3FN, static_cast<double>(xv[i] / 0.5f), {sat != 0});
      const double want = narrow_float_value(DType::F8E4M3FN, code) * 0.5;
      EXPECT_TRUE(want == y[i] || (std::isnan(want) && std::isnan(y[i]))) << i << ": " << y[i] << " vs " << want;
    }
  }
}

}  // namespace
}  // namespace rlx
