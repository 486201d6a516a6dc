// safetensors: round trips for every dtype, and validation of truncated or malicious files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "rlx/safetensors.h"
#include "support/test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A file from a hand-written header and data section.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string parse_error(const std::string& bytes) {
  return testing::error_message([&] { SafetensorsFile::from_bytes(bytes.data(), bytes.size()); });
}

TEST(Safetensors, RoundTripsEveryDtypeThroughAFile) {
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.emplace_back("f32", testing::random_tensor(DType::F32, {2, 3}, 1));
  ts.emplace_back("f16", testing::random_tensor(DType::F16, {4}, 2));
  ts.emplace_back("bf16", testing::random_tensor(DType::BF16, {3, 1}, 3));
  ts.emplace_back("i64", Tensor::i64({3}, std::vector<int64_t>{-1, 0, int64_t{1} << 40}));
  ts.emplace_back("i32", Tensor::i32({2}, std::vector<int32_t>{-7, 9}));
  ts.emplace_back("u8", Tensor::of<uint8_t>({2}, std::vector<uint8_t>{0, 255}));
  ts.emplace_back("bool", Tensor::boolean({3}, std::vector<uint8_t>{1, 0, 1}));
  ts.emplace_back("scalar", Tensor::scalar_f32(2.5f));
  ts.emplace_back("empty", Tensor::f32({0, 4}, {}));
  const fs::path p = fs::temp_directory_path() / ("rlx_st_" + std::to_string(::getpid()) + ".safetensors");
  save_safetensors(p.string(), ts, {{"format", "pt"}});
  const SafetensorsFile f(p.string());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.entries().size(), ts.size());
  for (const auto& [name, t] : ts) {
    const Tensor back = f.tensor(name);
    EXPECT_EQ(back.dtype(), t.dtype()) << name;
    EXPECT_EQ(back.shape(), t.shape()) << name;
    ASSERT_EQ(back.nbytes(), t.nbytes()) << name;
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0) << name;
    }
  }
  EXPECT_EQ(load_safetensors(p.string()).size(), ts.size());
  fs::remove(p);
}

TEST(Safetensors, HeaderIsPaddedSoDataIsAligned) {
  const std::string b = safetensors_bytes({{"x", Tensor::scalar_f32(1)}});
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST(Safetensors, RejectsTruncatedFiles) {
  const std::string good = safetensors_bytes({{"w", Tensor::f32({4}, std::vector<float>{1, 2, 3, 4})}});
  EXPECT_THAT(parse_error(good.substr(0, 5)), HasSubstr("too short"));
  EXPECT_THAT(parse_error(good.substr(0, 20)), HasSubstr("runs past the end"));
  EXPECT_THAT(parse_error(good.substr(0, good.size() - 1)), HasSubstr("run past"));
}

TEST(Safetensors, RejectsMaliciousHeaders) {
  const std::string data(16, '\0');
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", data)),
              HasSubstr("run past"));
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data)),
              HasSubstr("do not hold"));
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,16]}})", data)),
              HasSubstr("non-negative"));
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", data)),
              HasSubstr("'Q4'"));
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", data)),
              HasSubstr("before begin"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                    data)),
              HasSubstr("overlap"));
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})", data)),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(parse_error(make_file(R"({"w":[[[[[[[[1]]]]]]]]})", data)), HasSubstr("nested deeper"));
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,16]}})", data)),
              HasSubstr("too large"));
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1}})", data)),
              HasSubstr("unknown field 'extra'"));
  std::string huge(8, '\0');
  const uint64_t n = uint64_t{1} << 62;
  std::memcpy(huge.data(), &n, 8);
  EXPECT_THAT(parse_error(huge + "{}"), HasSubstr("100 MiB"));
}

TEST(Safetensors, BoolBytesMustBeZeroOrOne) {
  const std::string b = make_file(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2));
  const auto f = SafetensorsFile::from_bytes(b.data(), b.size());
  EXPECT_THAT(testing::error_message([&] { f.tensor("m"); }), HasSubstr("BOOL byte"));
  EXPECT_THAT(testing::error_message([&] { f.tensor("nope"); }), HasSubstr("no tensor named 'nope'"));
}

TEST(Safetensors, MissingFileAndBadNames) {
  EXPECT_THAT(testing::error_message([] { SafetensorsFile f("/nonexistent/x.safetensors"); }), HasSubstr("cannot open"));
  EXPECT_THAT(testing::error_message([] { safetensors_bytes({{"a", Tensor::scalar_f32(1)}, {"a", Tensor::scalar_f32(2)}}); }),
              HasSubstr("used twice"));
}

}  // namespace
}  // namespace rlx
