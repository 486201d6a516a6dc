// safetensors: round trips for every dtype, and validation of truncated or malicious files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "rlx/safetensors.h"
#include "support/test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

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
              HasSubstr("more elements than a 64-bit count holds"));
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

// ---- hardening (issue 26) --------------------------------------------------------------

// A scratch folder removed afterwards.
struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("rlx_st_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::create_directories(dir); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// 100k nested brackets (arrays, objects, in a tensor's field or at the top) are rejected
// before the parser runs; the message is short.
TEST(Safetensors, DeeplyNestedHeadersAreRejectedBeforeParsing) {
  const std::string data(16, '\0');
  const std::string deep = "{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const std::string msg = parse_error(make_file(deep, data));
  EXPECT_THAT(msg, HasSubstr("nested deeper than 4"));
  EXPECT_LT(msg.size(), 300u);
  std::string objects = "{";
  for (int i = 0; i < 100000; ++i) objects += "\"a\":{";
  EXPECT_THAT(parse_error(make_file(objects, data)), HasSubstr("nested deeper"));
  // Brackets inside a string (here a tensor name) do not count.
  const std::string name(1000, '[');
  const std::string ok = make_file("{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data);
  const auto f = SafetensorsFile::from_bytes(ok.data(), ok.size());
  EXPECT_TRUE(f.contains(name));
}

// A name used twice (nlohmann would keep only the last) is an error, at the top and inside a tensor.
TEST(Safetensors, DuplicateNamesAreRejected) {
  const std::string data(16, '\0');
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                    data)),
              AllOf(HasSubstr("names 'w' twice"), HasSubstr("two tensors with one name")));
  EXPECT_THAT(parse_error(make_file(R"({"w":{"dtype":"F32","dtype":"I32","shape":[4],"data_offsets":[0,16]}})", data)),
              HasSubstr("names 'dtype' twice"));
  EXPECT_THAT(parse_error(make_file(R"({"__metadata__":{"k":"a","k":"b"}})", data)), HasSubstr("names 'k' twice"));
}

// Overlap is found whatever lies between: an empty tensor between two overlapping ones, a
// range inside an earlier long one, equal ranges.
TEST(Safetensors, OverlapsAreFoundPastEmptyAndNestedRanges) {
  const std::string data(32, '\0');
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                    data)),
              AllOf(HasSubstr("'a' [0, 8)"), HasSubstr("'b' [4, 12)"), HasSubstr("overlap")));
  // b lies inside a, c starts after b ends but still inside a.
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                                    R"("c":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                                    data)),
              HasSubstr("overlap"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                    data)),
              HasSubstr("overlap"));
  // Adjacent ranges and empty tensors anywhere are fine.
  const std::string ok = make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                   R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                   R"("b":{"dtype":"F32","shape":[6],"data_offsets":[8,32]}})",
                                   data);
  EXPECT_EQ(SafetensorsFile::from_bytes(ok.data(), ok.size()).entries().size(), 3u);
}

// The tensors must cover the data section exactly (the format's rule): a hole between two
// tensors, or bytes after the last one, is a malformed file.
TEST(Safetensors, BytesOfNoTensorAreRejected) {
  const std::string data(32, '\0');
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})",
                                    data)),
              AllOf(HasSubstr("bytes [8, 16)"), HasSubstr("belong to no tensor"), HasSubstr("before 'b'")));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                                    R"("b":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})",
                                    data)),
              HasSubstr("bytes [0, 8)"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data)),
              AllOf(HasSubstr("16 bytes after the last tensor"), HasSubstr("32 bytes")));
  EXPECT_THAT(parse_error(make_file(R"({"__metadata__":{"k":"v"}})", std::string(4, '\0'))),
              HasSubstr("4 bytes after the last tensor"));
}

// Shapes go through the size policy (2^41 elements fits int64 but is over the cap).
TEST(Safetensors, ShapesAreCheckedAgainstTheSizePolicy) {
  const std::string msg =
      parse_error(make_file(R"({"w":{"dtype":"U8","shape":[2199023255552],"data_offsets":[0,16]}})", std::string(16, '\0')));
  EXPECT_THAT(msg, AllOf(HasSubstr("tensor 'w'"), HasSubstr("limit")));
}

// Only regular files; a FIFO fails at once instead of blocking in open.
TEST(Safetensors, OnlyRegularFilesAreRead) {
  TempDir t;
  const std::string fifo = (t.dir / "w.safetensors").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(testing::error_message([&] { SafetensorsFile f(fifo); }), HasSubstr("is a FIFO"));
  EXPECT_THAT(testing::error_message([&] { SafetensorsFile f(t.dir.string()); }), HasSubstr("is a directory"));
  EXPECT_THAT(testing::error_message([] { SafetensorsFile f("/nonexistent/x.safetensors"); }),
              HasSubstr("No such file or directory"));
}

// Control characters in names are escaped in messages.
TEST(Safetensors, NamesInMessagesAreEscaped) {
  const std::string msg =
      parse_error(make_file("{\"w\\u001b[2J\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}", std::string(16, '\0')));
  EXPECT_THAT(msg, AllOf(HasSubstr("w\\x1b[2J"), Not(HasSubstr("\x1b"))));
}

// Writing is checked: a full device is an error with the OS reason; nothing is left behind.
TEST(Safetensors, SaveReportsWriteFailures) {
  TempDir t;
  const std::vector<std::pair<std::string, Tensor>> tensors = {{"w", Tensor::f32({2}, std::vector<float>{1, 2})}};
  EXPECT_THAT(testing::error_message([&] { save_safetensors("/dev/full", tensors); }),
              AllOf(HasSubstr("/dev/full"), HasSubstr("No space left on device")));
  EXPECT_THAT(testing::error_message([&] { save_safetensors((t.dir / "no/dir/w.safetensors").string(), tensors); }),
              HasSubstr("No such file or directory"));
  save_safetensors((t.dir / "w.safetensors").string(), tensors);
  EXPECT_EQ(load_safetensors((t.dir / "w.safetensors").string()).at("w").to_f64(), (std::vector<double>{1, 2}));
  for (const auto& e : fs::directory_iterator(t.dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace rlx
