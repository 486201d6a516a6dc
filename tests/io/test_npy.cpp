// .npy read/write: round trips of every dtype, hand-written files of versions 1.0/2.0/3.0,
// and every rejection path (corrupt headers, truncation, Fortran order, big-endian, ...).
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::error_message;
using testing::random_tensor;

namespace fs = std::filesystem;

// A scratch directory per test, removed afterwards.
class Npy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("rlx_npy_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  void write_bytes(const std::string& p, const std::string& bytes) const {
    std::ofstream f(p, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string read_bytes(const std::string& p) const {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // A file with the given version, header text (padded to 64 bytes + '\n') and data bytes.
  std::string npy(int major, std::string header, const std::string& data) const {
    const size_t pre = major == 1 ? 10 : 12;
    const size_t total = (pre + header.size() + 1 + 63) / 64 * 64;
    header.append(total - pre - header.size() - 1, ' ');
    header += '\n';
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    const auto len = static_cast<uint32_t>(header.size());
    for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) out += static_cast<char>((len >> (8 * i)) & 0xFF);
    return out + header + data;
  }
  std::string load_error(const std::string& bytes) {
    const std::string p = path("bad.npy");
    write_bytes(p, bytes);
    return error_message([&] { load_npy(p); });
  }

  fs::path dir_;
};

std::string f32_bytes(std::vector<float> v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

TEST_F(Npy, RoundTripsEveryDTypeAndShape) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3, 4}, {0, 3}, {1}};
  for (DType dt : kAllDTypes) {
    if (dt == DType::BF16) continue;  // covered below
    if (is_storage_only(dt)) continue;  // no NumPy dtype (refused: test_dtype_narrow_ops.cpp)
    for (const auto& shape : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + dims_str(shape));
      const Tensor t = random_tensor(dt, shape, 3, -100, 100);
      save_npy(t, path("t.npy"));
      const Tensor back = load_npy(path("t.npy"));
      EXPECT_EQ(back.dtype(), dt);
      EXPECT_EQ(back.shape(), shape);
      ASSERT_EQ(back.nbytes(), t.nbytes());
      EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0);
    }
  }
}

TEST_F(Npy, Bf16IsSavedAsF32) {
  const Tensor t = random_tensor(DType::BF16, {3, 4}, 5);
  save_npy(t, path("b.npy"));
  const std::string bytes = read_bytes(path("b.npy"));
  EXPECT_NE(bytes.find("'descr': '<f4'"), std::string::npos);
  const Tensor back = load_npy(path("b.npy"));
  EXPECT_EQ(back.dtype(), DType::F32);
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(back.to_f32(), t.to_f32());  // widening is exact
}

TEST_F(Npy, WritesNumpyCompatibleHeaders) {
  save_npy(Tensor::f32({3}, std::vector<float>{1, 2, 3}), path("a.npy"));
  const std::string a = read_bytes(path("a.npy"));
  ASSERT_GE(a.size(), 10u);
  EXPECT_EQ(a.substr(0, 6), std::string("\x93NUMPY", 6));
  EXPECT_EQ(a[6], 1);
  EXPECT_EQ(a[7], 0);
  const size_t header_len = static_cast<uint8_t>(a[8]) | (static_cast<size_t>(static_cast<uint8_t>(a[9])) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);  // data is 64-byte aligned
  EXPECT_EQ(a.size(), 10 + header_len + 12);
  const std::string header = a.substr(10, header_len);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_NE(header.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"), std::string::npos);
  // A header over 65535 bytes needs format version 2.0.
  const Tensor many_dims = Tensor::zeros(DType::I16, std::vector<int64_t>(23000, 1));
  save_npy(many_dims, path("v2.npy"));
  const std::string v2 = read_bytes(path("v2.npy"));
  EXPECT_EQ(v2[6], 2);
  EXPECT_EQ(load_npy(path("v2.npy")).shape(), many_dims.shape());
  save_npy(Tensor::scalar_i64(4), path("s.npy"));
  EXPECT_NE(read_bytes(path("s.npy")).find("'descr': '<i8', 'fortran_order': False, 'shape': (), }"), std::string::npos);
  save_npy(Tensor::zeros(DType::Bool, {2, 0}), path("z.npy"));
  EXPECT_NE(read_bytes(path("z.npy")).find("'descr': '|b1', 'fortran_order': False, 'shape': (2, 0), }"),
            std::string::npos);
}

TEST_F(Npy, ReadsVersions2And3AndHeaderVariants) {
  const std::string data = f32_bytes({1.5f, -2.0f});
  for (int major : {1, 2, 3}) {
    write_bytes(path("v.npy"), npy(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data));
    const Tensor t = load_npy(path("v.npy"));
    EXPECT_EQ(t.to_f32(), (std::vector<float>{1.5f, -2.0f})) << "version " << major;
  }
  // Key order, double quotes, no trailing comma, Python 2 long suffix, extra whitespace.
  write_bytes(path("w.npy"), npy(1, "{\"shape\": (1L, 2L), \"fortran_order\":False,'descr':'<f4'}", data));
  const Tensor w = load_npy(path("w.npy"));
  EXPECT_EQ(w.shape(), (std::vector<int64_t>{1, 2}));
  // Single-byte types with either byte-order mark.
  write_bytes(path("i.npy"), npy(1, "{'descr': '<i1', 'fortran_order': False, 'shape': (2,)}", std::string("\x05\xfb", 2)));
  const Tensor i = load_npy(path("i.npy"));
  EXPECT_EQ(i.dtype(), DType::I8);
  EXPECT_EQ(i.to_i64(), (std::vector<int64_t>{5, -5}));
  write_bytes(path("u.npy"), npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)}", std::string("\xff", 1)));
  EXPECT_EQ(load_npy(path("u.npy")).to_i64(), (std::vector<int64_t>{255}));
}

TEST_F(Npy, RejectsCorruptHeaders) {
  const std::string data = f32_bytes({1, 2});
  const auto with = [&](const std::string& header) { return load_error(npy(1, header, data)); };
  EXPECT_THAT(load_error(std::string("\x93NUMPX\x01\x00\x10\x00", 10)), HasSubstr("bad magic"));
  EXPECT_THAT(load_error(std::string("\x93NUMPY\x04\x00\x10\x00", 10)), HasSubstr("unsupported .npy format version 4.0"));
  EXPECT_THAT(load_error(std::string("\x93NUMPY\x01", 7)), HasSubstr("truncated"));
  EXPECT_THAT(load_error(std::string("\x93NUMPY\x02\x00\x10\x00", 10)), HasSubstr("truncated"));
  EXPECT_THAT(load_error(std::string("\x93NUMPY\x01\x00\x40\x00{'descr'", 17)), HasSubstr("truncated: the header needs 64"));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }"), HasSubstr("Fortran-ordered"));
  EXPECT_THAT(with("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }"), HasSubstr("big-endian"));
  EXPECT_THAT(with("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }"), HasSubstr("unsupported dtype '<c8'"));
  EXPECT_THAT(with("{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }"), HasSubstr("unsupported dtype '<f16'"));
  EXPECT_THAT(with("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }"), HasSubstr("structured"));
  EXPECT_THAT(with("{'descr': '<f4', 'shape': (2,), }"), HasSubstr("needs the keys"));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}"), HasSubstr("unexpected key 'extra'"));
  // A repeated key must not silently take the last value.
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'descr': '<i8'}"),
              HasSubstr("key 'descr' appears twice"));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False, 'shape': 2}"), HasSubstr("'shape' must be a tuple"));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False, 'shape': ('2',)}"), HasSubstr("'shape' must be a tuple"));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}"), HasSubstr("'fortran_order' must be True or False"));
  EXPECT_THAT(with("{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}"), HasSubstr("malformed header"));
  EXPECT_THAT(with("{'descr': '<f4' 'fortran_order': False}"), HasSubstr("expected ',' or '}'"));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}"),
              HasSubstr("integer too large"));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 8)}"),
              HasSubstr("more elements than a 64-bit count holds"));
  EXPECT_THAT(with("['descr']"), HasSubstr("structured"));
  EXPECT_THAT(with("7"), HasSubstr("expected a dict"));
}

TEST_F(Npy, RejectsTruncatedOrOversizedDataAndBadBools) {
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  EXPECT_THAT(load_error(npy(1, header, f32_bytes({1, 2}))), HasSubstr("truncated: f32[3] needs 12 data bytes but only 8"));
  EXPECT_THAT(load_error(npy(1, header, f32_bytes({1, 2, 3, 4}))), HasSubstr("4 unexpected bytes"));
  EXPECT_THAT(load_error(npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,)}", std::string("\x01\x02", 2))),
              HasSubstr("bool element 1 is 2"));
  EXPECT_THAT(error_message([&] { load_npy(path("missing.npy")); }),
              AllOf(HasSubstr("cannot open"), HasSubstr("No such file or directory")));
  EXPECT_THAT(error_message([&] { save_npy(Tensor::f32({1}, std::vector<float>{1}), path("no/such/dir/x.npy")); }),
              HasSubstr("cannot write"));
}

// ---- hardening (issue 26) --------------------------------------------------------------

// Only regular files are read: a directory says so (not "bad magic string"), a FIFO is an
// error at once instead of blocking in open, a device is named.
TEST_F(Npy, OnlyRegularFilesAreRead) {
  EXPECT_THAT(error_message([&] { load_npy(dir_.string()); }),
              AllOf(HasSubstr("is a directory"), Not(HasSubstr("magic"))));
  ASSERT_EQ(::mkfifo(path("fifo.npy").c_str(), 0600), 0);
  EXPECT_THAT(error_message([&] { load_npy(path("fifo.npy")); }), HasSubstr("is a FIFO"));
  EXPECT_THAT(error_message([&] { load_npy("/dev/zero"); }), HasSubstr("is a character device"));
  // A symbolic link to a regular file is fine.
  save_npy(Tensor::f32({2}, std::vector<float>{1, 2}), path("a.npy"));
  fs::create_symlink(path("a.npy"), path("link.npy"));
  EXPECT_EQ(load_npy(path("link.npy")).to_f64(), (std::vector<double>{1, 2}));
}

// Shapes go through the size policy: 2^41 elements is over the element cap even though the
// byte count fits int64; the message names the file and the limit.
TEST_F(Npy, ShapesAreCheckedAgainstTheSizePolicy) {
  const std::string msg =
      load_error(npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2199023255552,), }", ""));
  EXPECT_THAT(msg, AllOf(HasSubstr("bad.npy"), HasSubstr("2199023255552 elements"), HasSubstr("limit")));
  EXPECT_THAT(load_error(npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (65536, 65536, 65536, 65536), }", "")),
              HasSubstr("more elements than a 64-bit count holds"));
  // Zero-size arrays are still fine.
  const std::string ok = path("empty.npy");
  write_bytes(ok, npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904), }", ""));
  EXPECT_EQ(load_npy(ok).numel(), 0);
}

// Every write is checked: a full device is an error with the OS reason, and a failed save
// leaves no partial or temporary file.
TEST_F(Npy, SaveReportsWriteFailures) {
  const Tensor t = Tensor::f32({3}, std::vector<float>{1, 2, 3});
  EXPECT_THAT(error_message([&] { save_npy(t, "/dev/full"); }),
              AllOf(HasSubstr("/dev/full"), HasSubstr("No space left on device")));
  fs::create_directory(dir_ / "d.npy");
  EXPECT_THAT(error_message([&] { save_npy(t, path("d.npy")); }), HasSubstr("is a directory"));
  EXPECT_THAT(error_message([&] { save_npy(t, path("no/such/dir/x.npy")); }), HasSubstr("No such file or directory"));
  // A FIFO without a reader: an error at once, no hang (and the FIFO is not replaced).
  ASSERT_EQ(::mkfifo(path("fifo.npy").c_str(), 0600), 0);
  EXPECT_THAT(error_message([&] { save_npy(t, path("fifo.npy")); }),
              AllOf(HasSubstr("fifo.npy"), HasSubstr("cannot open it for writing")));
  EXPECT_TRUE(fs::is_fifo(path("fifo.npy")));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  save_npy(t, path("ok.npy"));
  EXPECT_EQ(load_npy(path("ok.npy")).to_f64(), (std::vector<double>{1, 2, 3}));
}

}  // namespace
}  // namespace rlx
