// GGUF: writer -> reader round trips (every metadata type, versions 2 and 3, alignment, every
// stored tensor type), the byte layout the writer produces, and every malformed-file case.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "rlx/gguf.h"
#include "rlx/limits.h"
#include "rlx/safetensors.h"
#include "support/test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A file written byte by byte.
struct Bytes {
  std::string s;
  Bytes& raw(const std::string& b) { return s += b, *this; }
  template <class T>
  Bytes& num(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s.append(b, sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return num(v); }
  Bytes& u64(uint64_t v) { return num(v); }
  Bytes& str(const std::string& v) { return u64(v.size()).raw(v); }
  Bytes& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) { return raw("GGUF").u32(version).u64(tensors).u64(kvs); }
  Bytes& kv_u32(const std::string& k, uint32_t v) { return str(k).u32(4).u32(v); }
  Bytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t align = 32) { return s.append((align - s.size() % align) % align, '\0'), *this; }
  Bytes& zeros(size_t n) { return s.append(n, '\0'), *this; }
};

std::string parse_error(const std::string& bytes) {
  return testing::error_message([&] { GgufFile::from_bytes(bytes.data(), bytes.size(), "f.gguf"); });
}

GgufFile parse(const std::string& bytes) { return GgufFile::from_bytes(bytes.data(), bytes.size(), "f.gguf"); }

// Every value type, nested arrays, empty arrays and strings.
std::vector<std::pair<std::string, GgufValue>> all_values() {
  return {
      {"t.u8", GgufValue::u8(250)},
      {"t.i8", GgufValue::i8(-100)},
      {"t.u16", GgufValue::u16(65000)},
      {"t.i16", GgufValue::i16(-32000)},
      {"t.u32", GgufValue::u32(4000000000u)},
      {"t.i32", GgufValue::i32(-2000000000)},
      {"t.u64", GgufValue::u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", GgufValue::i64(std::numeric_limits<int64_t>::min())},
      {"t.f32", GgufValue::f32(0.1f)},
      {"t.f64", GgufValue::f64(-1e300)},
      {"t.bool", GgufValue::boolean(true)},
      {"t.string", GgufValue::string("llama \xe2\x9c\x93")},
      {"t.empty_string", GgufValue::string("")},
      {"t.strings", GgufValue::strings({"<s>", "", "</s>"})},
      {"t.i32s", GgufValue::array_of_i64(GgufValueType::I32, {1, -2, 3})},
      {"t.f32s", GgufValue::array_of(GgufValueType::F32, {0.5, -1.25})},
      {"t.bools", GgufValue::array_of_i64(GgufValueType::Bool, {1, 0, 1})},
      {"t.u64s", GgufValue::array_of_i64(GgufValueType::U64, {0, int64_t{1} << 62})},
      {"t.empty", GgufValue::array_of(GgufValueType::U8, {})},
      {"t.nested", GgufValue::array(GgufValueType::Array,
                                    {GgufValue::strings({"a", "b"}), GgufValue::array_of_i64(GgufValueType::I8, {-1}),
                                     GgufValue::array(GgufValueType::Array, {GgufValue::array_of(GgufValueType::F64, {2.5})})})},
  };
}

TEST(Gguf, EveryMetadataTypeRoundTripsInVersions2And3) {
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w(version);
    const auto values = all_values();
    for (const auto& [k, v] : values) w.add(k, v);
    const std::string bytes = w.bytes();
    const GgufFile f = parse(bytes);
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.alignment(), 32u);
    ASSERT_EQ(f.metadata().size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(f.metadata()[i].first, values[i].first);
      EXPECT_TRUE(f.metadata()[i].second == values[i].second) << values[i].first << ": " << f.metadata()[i].second.to_string();
    }
    EXPECT_EQ(f.get_u64("t.u64"), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(f.get_i64("t.i64"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(f.get_i64("t.i8"), -100);
    EXPECT_EQ(f.get_u64("t.u8"), 250u);
    EXPECT_FLOAT_EQ(static_cast<float>(f.get_f64("t.f32")), 0.1f);
    EXPECT_TRUE(f.get_bool("t.bool"));
    EXPECT_EQ(f.get_string("t.string"), "llama \xe2\x9c\x93");
    EXPECT_EQ(f.value("t.strings").as_strings(), (std::vector<std::string>{"<s>", "", "</s>"}));
    EXPECT_EQ(f.value("t.i32s").as_i64s(), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f.value("t.f32s").as_f64s(), (std::vector<double>{0.5, -1.25}));
    EXPECT_EQ(f.value("t.bools").as_i64s(), (std::vector<int64_t>{1, 0, 1}));
    const GgufValue& nested = f.value("t.nested");
    ASSERT_EQ(nested.size(), 3u);
    EXPECT_EQ(nested.at(1).element_type(), GgufValueType::I8);
    EXPECT_EQ(nested.at(2).at(0).as_f64s(), (std::vector<double>{2.5}));
    EXPECT_EQ(f.value("t.empty").size(), 0u);
    EXPECT_EQ(f.find("nope"), nullptr);
    EXPECT_THAT(testing::error_message([&] { f.get_u64("t.string"); }),
                AllOf(HasSubstr("metadata key 't.string'"), HasSubstr("string, not an integer")));
    EXPECT_THAT(testing::error_message([&] { f.get_u64("t.i8"); }), HasSubstr("not a non-negative integer"));
    EXPECT_THAT(testing::error_message([&] { f.value("nope"); }), HasSubstr("no metadata key 'nope'"));
    EXPECT_EQ(f.value("t.strings").to_string(), "array<string>[3] ['<s>', '', '</s>']");
    EXPECT_EQ(f.value("t.u32").to_string(), "u32 4000000000");
  }
}

TEST(Gguf, ValueConstructorsCheckRanges) {
  EXPECT_THAT(testing::error_message([] { GgufValue::array_of_i64(GgufValueType::U8, {256}); }), HasSubstr("does not fit u8"));
  EXPECT_THAT(testing::error_message([] { GgufValue::array_of_i64(GgufValueType::Bool, {2}); }), HasSubstr("does not fit bool"));
  EXPECT_THAT(testing::error_message([] { GgufValue::array_of(GgufValueType::I16, {1.5}); }), HasSubstr("in the range of i16"));
  EXPECT_THAT(testing::error_message([] { GgufValue::array_of(GgufValueType::I64, {0x1p63}); }), HasSubstr("in the range of i64"));
  EXPECT_THAT(testing::error_message([] { GgufValue::array_of(GgufValueType::U64, {-1}); }), HasSubstr("in the range of u64"));
  EXPECT_EQ(GgufValue::array_of(GgufValueType::U64, {0x1p63}).at(0).as_u64(), uint64_t{1} << 63);
  EXPECT_EQ(GgufValue::array_of(GgufValueType::I8, {-128}).at(0).as_i64(), -128);
  EXPECT_THAT(testing::error_message([] { GgufValue::array(GgufValueType::U8, {GgufValue::i8(1)}); }),
              HasSubstr("element 0 is i8"));
  EXPECT_THAT(testing::error_message([] { GgufValue::string("x").as_u64(); }), HasSubstr("string, not an integer"));
}

// The writer's bytes, field by field, as the spec lays them out.
TEST(Gguf, WriterFollowsTheSpecLayout) {
  GgufWriter w;
  w.add("general.architecture", GgufValue::string("llama"));
  w.add_tensor("a", Tensor::f32({3}, std::vector<float>{1, 2, 3}));
  w.add_tensor("b", Tensor::i32({1}, std::vector<int32_t>{7}));
  const std::string got = w.bytes();
  Bytes want;
  want.header(2, 1).str("general.architecture").u32(8).str("llama");
  want.tensor("a", {3}, 0, 0).tensor("b", {1}, 26, 32).pad();
  ASSERT_EQ(want.s.size() % 32, 0u);
  want.num(1.0f).num(2.0f).num(3.0f).pad().num(int32_t{7}).pad();
  EXPECT_EQ(got, want.s);
}

TEST(Gguf, CustomAlignmentIsWrittenAndHonoured) {
  GgufWriter w;
  w.set_alignment(64);
  w.add("general.name", GgufValue::string("x"));
  w.add_tensor("a", Tensor::f32({5}, std::vector<float>{1, 2, 3, 4, 5}));
  w.add_tensor("b", Tensor::f32({2}, std::vector<float>{6, 7}));
  const std::string bytes = w.bytes();
  const GgufFile f = parse(bytes);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.metadata()[0].first, "general.alignment");
  EXPECT_EQ(f.metadata()[0].second.type(), GgufValueType::U32);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor_info("b").offset, 64u);
  EXPECT_EQ(f.tensor("b").to_f32(), (std::vector<float>{6, 7}));
  EXPECT_THAT(testing::error_message([] { GgufWriter().set_alignment(12); }), HasSubstr("multiple of 8"));
  EXPECT_THAT(testing::error_message([] { GgufWriter().set_alignment(uint64_t{1} << 21); }), HasSubstr("at most 1 MiB"));
  // A 4 KiB alignment: the padding after each tensor spans more than one block of zeros.
  GgufWriter big;
  big.set_alignment(8192);
  big.add_tensor("a", Tensor::f32({1}, std::vector<float>{1}));
  big.add_tensor("b", Tensor::f32({1}, std::vector<float>{2}));
  const std::string bb = big.bytes();
  EXPECT_EQ(bb.size(), 3u * 8192);
  EXPECT_EQ(parse(bb).tensor("b").to_f32(), (std::vector<float>{2}));
}

TEST(Gguf, TensorsRoundTripRowMajor) {
  GgufWriter w;
  const Tensor f32 = testing::random_tensor(DType::F32, {2, 3, 4}, 1);
  const Tensor f16 = testing::random_tensor(DType::F16, {5, 2}, 2);
  const Tensor bf16 = testing::random_tensor(DType::BF16, {3}, 3);
  const Tensor f64 = testing::random_tensor(DType::F64, {2, 2}, 4);
  const Tensor i8 = testing::random_tensor(DType::I8, {4}, 5, -100, 100);
  const Tensor i16 = testing::random_tensor(DType::I16, {1, 4}, 6, -100, 100);
  const Tensor i64 = Tensor::i64({2}, std::vector<int64_t>{-1, int64_t{1} << 50});
  const Tensor empty = Tensor::f32({0, 4}, {});
  const std::vector<std::pair<std::string, Tensor>> ts = {{"f32", f32}, {"f16", f16}, {"bf16", bf16}, {"f64", f64},
                                                          {"i8", i8},   {"i16", i16}, {"i64", i64},   {"empty", empty}};
  for (const auto& [n, t] : ts) w.add_tensor(n, t);
  w.add_tensor("scalar", Tensor::scalar_f32(2.5f));
  const GgufFile f = parse(w.bytes());
  ASSERT_EQ(f.tensors().size(), ts.size() + 1);
  EXPECT_EQ(f.tensor_info("f32").ne, (std::vector<int64_t>{4, 3, 2}));  // ggml order
  for (const auto& [n, t] : ts) {
    const Tensor back = f.tensor(n);
    EXPECT_EQ(back.dtype(), t.dtype()) << n;
    EXPECT_EQ(back.shape(), t.shape()) << n;
    ASSERT_EQ(back.nbytes(), t.nbytes()) << n;
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0) << n;
    }
    EXPECT_EQ(f.tensor_info(n).offset % 32, 0u);
  }
  EXPECT_EQ(f.tensor("scalar").shape(), (std::vector<int64_t>{1}));
  EXPECT_EQ(f.tensor_f32("f16").to_f32(), f16.to_f32());
  EXPECT_EQ(f.tensor_f32("bf16").to_f32(), bf16.to_f32());
  EXPECT_THAT(testing::error_message([&] { f.tensor_f32("i8"); }), HasSubstr("reads as integers with tensor()"));
  EXPECT_THAT(testing::error_message([&] { f.tensor("nope"); }), HasSubstr("no tensor named 'nope'"));
}

TEST(Gguf, QuantizedTensorsDequantizeOnRequest) {
  const Tensor w32 = testing::random_tensor(DType::F32, {3, 256}, 9);
  GgufWriter w;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K})
    w.add_tensor(std::string("w.") + ggml_type_name(t), w32, t);
  w.add("general.quantization_version", GgufValue::u32(2));
  const GgufFile f = parse(w.bytes());
  const std::vector<float> x = w32.to_f32();
  for (const auto& info : f.tensors()) {
    EXPECT_EQ(info.shape(), (std::vector<int64_t>{3, 256})) << info.name;
    EXPECT_EQ(f.raw(info.name).size(), static_cast<size_t>(3 * ggml_nbytes(info.type, 256, "row"))) << info.name;
    const Tensor y = f.tensor_f32(info.name);
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{3, 256}));
    // The same bytes as quantizing directly; within a coarse bound of uniform [-1, 1) data.
    EXPECT_EQ(y.to_f32(), ggml_dequantize(info.type, ggml_quantize(info.type, x))) << info.name;
    const std::vector<float> yv = y.to_f32();
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(yv[i], x[i], 0.15) << info.name << " value " << i;
    EXPECT_THAT(testing::error_message([&] { f.tensor(info.name); }), HasSubstr("read it with tensor_f32()"));
  }
}

TEST(Gguf, WriterRejectsWhatTheSpecForbids) {
  GgufWriter w;
  w.add("a", GgufValue::u8(1));
  EXPECT_THAT(testing::error_message([&] { w.add("a", GgufValue::u8(2)); }), HasSubstr("added twice"));
  EXPECT_THAT(testing::error_message([&] { w.add("", GgufValue::u8(2)); }), HasSubstr("1 to 65535 bytes"));
  EXPECT_THAT(testing::error_message([&] { w.add("general.alignment", GgufValue::u64(64)); }), HasSubstr("must be a u32"));
  const Tensor t = Tensor::f32({2}, std::vector<float>{1, 2});
  w.add_tensor("t", t);
  EXPECT_THAT(testing::error_message([&] { w.add_tensor("t", t); }), HasSubstr("added twice"));
  EXPECT_THAT(testing::error_message([&] { w.add_tensor(std::string(65, 'n'), t); }), HasSubstr("1 to 64 bytes"));
  EXPECT_THAT(testing::error_message([&] { w.add_tensor("u8", Tensor::of<uint8_t>({1}, std::vector<uint8_t>{1})); }),
              HasSubstr("GGUF does not store"));
  EXPECT_THAT(testing::error_message([&] { w.add_tensor("r5", Tensor::f32({1, 1, 1, 1, 1}, std::vector<float>{1})); }),
              HasSubstr("at most 4 dims"));
  EXPECT_THAT(testing::error_message([&] { w.add_tensor("q", Tensor::f32({2, 48}, std::vector<float>(96)), GgmlType::Q4_0); }),
              HasSubstr("not a multiple of the Q4_0 block size 32"));
  EXPECT_THAT(testing::error_message([&] { w.add_raw("raw", GgmlType::Q8_0, {32}, std::string(33, '\0')); }),
              HasSubstr("33 bytes given"));
  EXPECT_THAT(testing::error_message([] { GgufWriter(1); }), HasSubstr("version 1"));
}

// ---- malformed files ------------------------------------------------------------------------

std::string small_valid_file() {
  GgufWriter w;
  w.add("general.architecture", GgufValue::string("llama"));
  w.add("t.nested", all_values().back().second);
  w.add_tensor("a", Tensor::f32({2, 32}, std::vector<float>(64, 1.0f)), GgmlType::Q8_0);
  w.add_tensor("b", Tensor::f32({3}, std::vector<float>{1, 2, 3}));
  return w.bytes();
}

TEST(Gguf, EveryTruncationIsAnError) {
  const std::string good = small_valid_file();
  ASSERT_NO_THROW(parse(good));
  // The last tensor's padding is not needed by its data; every shorter prefix must be refused.
  const size_t needed = good.size() - 32 + 12;
  for (size_t n = 0; n < needed; ++n) {
    const std::string msg = parse_error(good.substr(0, n));
    ASSERT_THAT(msg, HasSubstr("f.gguf")) << n;
    ASSERT_THAT(msg, ::testing::AnyOf(HasSubstr("truncated"), HasSubstr("too short"), HasSubstr("claims")))
        << "prefix " << n << ": " << msg;
  }
}

TEST(Gguf, HeaderErrors) {
  EXPECT_THAT(parse_error("GGU"), HasSubstr("too short for the 4-byte magic"));
  EXPECT_THAT(parse_error(Bytes().raw("GGML").u32(3).u64(0).u64(0).s), HasSubstr("not a GGUF file"));
  EXPECT_THAT(parse_error(Bytes().header(0, 0, 1).s), HasSubstr("version 1 (32-bit counts) is not supported"));
  EXPECT_THAT(parse_error(Bytes().header(0, 0, 0x03000000).s), HasSubstr("big-endian"));
  EXPECT_THAT(parse_error(Bytes().header(0, 0, 7).s), HasSubstr("unsupported GGUF version 7"));
  EXPECT_THAT(parse_error(Bytes().header(0, uint64_t{1} << 60).s), AllOf(HasSubstr("byte 16"), HasSubstr("claims")));
  EXPECT_THAT(parse_error(Bytes().header(uint64_t{1} << 60, 0).s), AllOf(HasSubstr("byte 8"), HasSubstr("claims")));
  const GgufFile empty = parse(Bytes().header(0, 0).s);  // no metadata, no tensors, no data section
  EXPECT_TRUE(empty.tensors().empty());
}

TEST(Gguf, MetadataErrors) {
  EXPECT_THAT(parse_error(Bytes().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).s),
              AllOf(HasSubstr("byte 41"), HasSubstr("metadata key 'k' appears twice")));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).str("k").u32(13).u32(0).s), HasSubstr("value type 13"));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).str("").u32(4).u32(0).s), HasSubstr("key #0 is empty"));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).str("k").u32(7).num(uint8_t{2}).s), HasSubstr("bool stored as 2"));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).str("k").u32(9).u32(7).u64(2).num(uint8_t{1}).num(uint8_t{5}).s),
              HasSubstr("element 1 is a bool stored as 5"));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).str("k").u32(9).u32(4).u64(uint64_t{1} << 61).s),
              HasSubstr("claims 2305843009213693952 u32 elements"));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).str("k").u32(9).u32(14).u64(0).s), HasSubstr("element type 14"));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).str("k").u32(8).u64(1000).raw("abc").s), HasSubstr("truncated"));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).u64(70000).raw(std::string(70000, 'k')).u32(4).u32(0).s),
              HasSubstr("more than the 65535 allowed"));
  // general.alignment: a u32, non-zero multiple of 8.
  EXPECT_THAT(parse_error(Bytes().header(0, 1).str("general.alignment").u32(10).u64(32).s), HasSubstr("must be a u32, not u64"));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).kv_u32("general.alignment", 12).s), HasSubstr("non-zero multiple of 8"));
  EXPECT_THAT(parse_error(Bytes().header(0, 1).kv_u32("general.alignment", 0).s), HasSubstr("non-zero multiple of 8"));
  // Arrays nested deeper than the size policy allows.
  Bytes deep;
  deep.header(0, 1).str("k").u32(9);
  for (int i = 0; i < 10; ++i) deep.u32(9).u64(1);
  deep.u32(0).u64(0);
  {
    Limits l;
    l.max_nesting_depth = 8;
    ScopedLimits scoped(l);
    EXPECT_THAT(parse_error(deep.s), HasSubstr("nests arrays deeper than 8"));
  }
  EXPECT_NO_THROW(parse(deep.s));
}

TEST(Gguf, TensorInfoErrors) {
  auto file = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data) {
    return Bytes().header(1, 0).tensor("w", std::move(ne), type, offset).pad().zeros(data).s;
  };
  EXPECT_NO_THROW(parse(file({32, 2}, 8, 0, 68)));
  EXPECT_THAT(parse_error(file({32, 2}, 8, 0, 67)),
              AllOf(HasSubstr("tensor 'w' (Q8_0[2,32], 68 bytes at data offset 0) runs past the end"), HasSubstr("truncated")));
  EXPECT_THAT(parse_error(file({31}, 8, 0, 68)), HasSubstr("first (innermost) dim of 31, not a multiple of its 32-value blocks"));
  EXPECT_THAT(parse_error(file({4}, 4, 0, 68)), HasSubstr("ggml type 4, which rlx does not know"));
  EXPECT_THAT(parse_error(file({4}, 0, 16, 68)), HasSubstr("data offset 16 is not a multiple of the alignment 32"));
  EXPECT_THAT(parse_error(file({}, 0, 0, 68)), HasSubstr("0 dims"));
  EXPECT_THAT(parse_error(file({1, 1, 1, 1, 1}, 0, 0, 68)), HasSubstr("5 dims; GGUF tensors have 1 to 4"));
  EXPECT_THAT(parse_error(file({uint64_t{1} << 63}, 0, 0, 68)), HasSubstr("beyond int64"));
  EXPECT_THAT(parse_error(file({uint64_t{1} << 32, uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 68)),
              HasSubstr("more elements than a 64-bit count holds"));
  EXPECT_THAT(parse_error(file({uint64_t{1} << 62}, 0, 0, 68)), HasSubstr("max_tensor_elements"));
  EXPECT_THAT(parse_error(file({uint64_t{1} << 40}, 0, 0, 68)), HasSubstr("max_tensor_bytes"));
  {
    Limits l;
    l.max_tensor_elements = 16;
    ScopedLimits scoped(l);
    EXPECT_THAT(parse_error(file({32, 2}, 8, 0, 68)), HasSubstr("64 elements, more than the limit of 16"));
  }
  EXPECT_THAT(parse_error(Bytes().header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad().zeros(64).s),
              HasSubstr("tensor 'w' appears twice"));
  EXPECT_THAT(parse_error(Bytes().header(1, 0).tensor("", {4}, 0, 0).pad().zeros(64).s), HasSubstr("empty name"));
  EXPECT_THAT(parse_error(Bytes().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).pad().zeros(64).s),
              HasSubstr("tensors 'a' [0, 64) and 'b' [32, 48) overlap"));
  // Empty tensors may sit anywhere inside the data section.
  EXPECT_NO_THROW(parse(Bytes().header(2, 0).tensor("a", {0}, 0, 0).tensor("b", {4}, 0, 0).pad().zeros(16).s));
}

TEST(Gguf, FilesOnDiskAreMappedAndConverted) {
  const fs::path dir = fs::temp_directory_path() / ("rlx_gguf_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Tensor w = testing::random_tensor(DType::F32, {4, 64}, 11);
  const Tensor b = testing::random_tensor(DType::BF16, {4}, 12);
  const Tensor ids = Tensor::i64({2}, std::vector<int64_t>{3, 4});
  save_safetensors((dir / "m.safetensors").string(), {{"w", w}, {"b", b}, {"ids", ids}}, {{"format", "pt"}});
  GgufConvertOptions opt;
  opt.quantize = GgmlType::Q8_0;
  opt.architecture = "llama";
  safetensors_to_gguf((dir / "m.safetensors").string(), (dir / "m.gguf").string(), opt);
  {
    const GgufFile f((dir / "m.gguf").string());
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_string("format"), "pt");
    EXPECT_EQ(f.get_u64("general.quantization_version"), 2u);
    EXPECT_EQ(f.tensor_info("w").type, GgmlType::Q8_0);
    EXPECT_EQ(f.tensor_info("b").type, GgmlType::BF16);  // rank 1: kept as stored
    EXPECT_TRUE(testing::all_close(f.tensor_f32("w"), {4, 64}, testing::to_doubles(w), {0, 0.01}));
    EXPECT_EQ(f.tensor("ids").to_i64(), (std::vector<int64_t>{3, 4}));
  }
  gguf_to_safetensors((dir / "m.gguf").string(), (dir / "back.safetensors").string());
  const SafetensorsFile back((dir / "back.safetensors").string());
  EXPECT_EQ(back.entry("w").dtype, DType::F32);
  EXPECT_EQ(back.entry("b").dtype, DType::BF16);
  EXPECT_EQ(back.metadata().at("general.architecture"), "llama");
  EXPECT_EQ(back.metadata().at("general.quantization_version"), "2");
  EXPECT_EQ(back.tensor("b").to_f32(), b.to_f32());
  EXPECT_THAT(testing::error_message([&] { GgufFile f((dir / "missing.gguf").string()); }), HasSubstr("cannot open"));
  EXPECT_THAT(testing::error_message([&] { GgufFile f(dir.string()); }), HasSubstr("GGUF file"));
  save_safetensors((dir / "u8.safetensors").string(), {{"m", Tensor::of<uint8_t>({1}, std::vector<uint8_t>{1})}});
  EXPECT_THAT(testing::error_message([&] {
                safetensors_to_gguf((dir / "u8.safetensors").string(), (dir / "u8.gguf").string());
              }),
              AllOf(HasSubstr("tensor 'm'"), HasSubstr("GGUF does not store")));
  EXPECT_FALSE(fs::exists(dir / "u8.gguf"));
  fs::remove_all(dir);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `rlx ARGS` (paths without spaces or quotes), capturing stdout and stderr.
int run_cli(const fs::path& dir, const std::string& args, std::string* out, std::string* err) {
  const std::string cmd = std::string("'") + rlx::testing::cli_path() + "' " + args + " >'" + (dir / "out.txt").string() + "' 2>'" +
                          (dir / "err.txt").string() + "'";
  const int status = std::system(cmd.c_str());
  *out = slurp(dir / "out.txt");
  *err = slurp(dir / "err.txt");
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Gguf, CliInspect) {
  const fs::path dir = fs::temp_directory_path() / ("rlx_gguf_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  GgufWriter w;
  w.add("general.architecture", GgufValue::string("llama"));
  w.add("tokenizer.ggml.tokens", GgufValue::strings({"<unk>", "<s>", "</s>"}));
  w.add_tensor("blk.0.ffn_up.weight", testing::random_tensor(DType::F32, {2, 256}, 1), GgmlType::Q4_K);
  w.add_tensor("output_norm.weight", testing::random_tensor(DType::F32, {256}, 2));
  w.save((dir / "m.gguf").string());
  { std::ofstream((dir / "bad.gguf").string(), std::ios::binary) << "GGML and then some"; }
  std::string out, err;
  EXPECT_EQ(run_cli(dir, "inspect " + (dir / "m.gguf").string(), &out, &err), 0) << err;
  EXPECT_THAT(out, AllOf(HasSubstr("(version 3, alignment 32,"), HasSubstr("general.architecture: string 'llama'"),
                         HasSubstr("tokenizer.ggml.tokens: array<string>[3] ['<unk>', '<s>', '</s>']"),
                         HasSubstr("Q4_K[2,256]"), HasSubstr("F32[256]"), HasSubstr("parameters: 768 elements"),
                         HasSubstr("model: llama, not buildable: ")));
  EXPECT_NE(run_cli(dir, "inspect " + (dir / "bad.gguf").string(), &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("not a GGUF file"));
  fs::remove_all(dir);
}

TEST(Gguf, CliQuantizeReportsTheErrorPerTensor) {
  const fs::path dir = fs::temp_directory_path() / ("rlx_gguf_q_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Tensor up = testing::random_tensor(DType::BF16, {4, 256}, 1);
  const Tensor norm = testing::random_tensor(DType::F32, {256}, 2);
  const Tensor odd = testing::random_tensor(DType::F32, {3, 100}, 3);  // 100: not a multiple of 256
  save_safetensors((dir / "m.safetensors").string(), {{"up", up}, {"norm", norm}, {"odd", odd}});
  std::string out, err;
  const std::string q = (dir / "q.gguf").string();
  ASSERT_EQ(run_cli(dir, "quantize " + (dir / "m.safetensors").string() + " " + q + " --scheme q4_k", &out, &err), 0) << err;
  EXPECT_THAT(out, AllOf(HasSubstr("(Q4_K)"), HasSubstr("written: 3 tensors (1 quantized)")));
  EXPECT_THAT(out, ::testing::ContainsRegex("up +bf16 +Q4_K +\\[4,256\\] +0\\.0[0-9]+ +0\\.[0-9]+"));
  EXPECT_THAT(out, ::testing::ContainsRegex("odd +f32 +f32 +\\[3,100\\] +\\(kept\\)"));
  const GgufFile f(q);
  EXPECT_EQ(f.tensor_info("up").type, GgmlType::Q4_K);
  EXPECT_EQ(f.tensor_info("norm").type, GgmlType::F32);
  EXPECT_EQ(f.get_u64("general.quantization_version"), 2u);
  EXPECT_TRUE(testing::all_close(f.tensor_f32("up"), {4, 256}, testing::to_doubles(up), {0, 0.1}));
  // GGUF in: the Q4_K tensor is re-quantized to Q8_0 (from its dequantized values), the rest kept.
  const std::string q8 = (dir / "q8.gguf").string();
  ASSERT_EQ(run_cli(dir, "quantize " + q + " " + q8 + " --scheme q8_0", &out, &err), 0) << err;
  EXPECT_EQ(GgufFile(q8).tensor_info("up").type, GgmlType::Q8_0);
  EXPECT_NE(run_cli(dir, "quantize " + q + " " + q8 + " --scheme q9", &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("unknown ggml type 'q9'"));
  EXPECT_NE(run_cli(dir, "quantize " + q + " " + q8 + " --scheme iq4_xs", &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("rlx cannot write IQ4_XS"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rlx
