// examples/remove_background.cpp run as a subprocess (path from RLX_REMOVE_BACKGROUND_PATH) on a
// synthetic model with ISNet's signature (input f32[1,3,1024,1024] -> mask [1,1,1024,1024]:
// Sigmoid(ReduceMean over the channels)) and small PNGs written here; nothing is downloaded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#ifdef RLX_REMOVE_BACKGROUND_PATH

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "onnx/onnx_builder.h"
#include "rlx/serialize.h"

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#include "stb_image.h"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include "stb_image_write.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::OnnxBuilder;

struct Image {
  int w = 0, h = 0, channels = 0;
  std::vector<uint8_t> px;  // interleaved
  uint8_t at(int x, int y, int c) const { return px[(static_cast<size_t>(y) * w + x) * channels + c]; }
};

// The mask the example should write for an RGB pixel: the model's Sigmoid(mean((p - 128) / 256)),
// rounded to 8 bits.
int expected_mask(int r, int g, int b) {
  const double mean = ((r - 128) / 256.0 + (g - 128) / 256.0 + (b - 128) / 256.0) / 3.0;
  return static_cast<int>(std::lround(255.0 / (1.0 + std::exp(-mean))));
}

class RemoveBackground : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("rlx_remove_bg_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  struct Proc {
    int code = -1;
    std::string out;
  };
  Proc run(const std::string& args) const {
    const std::string out = path("out.txt");
    const std::string cmd = std::string("'") + RLX_REMOVE_BACKGROUND_PATH + "' " + args + " >'" + out + "' 2>&1";
    const int status = std::system(cmd.c_str());
    Proc p;
    p.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(out);
    std::stringstream ss;
    ss << f.rdbuf();
    p.out = ss.str();
    return p;
  }

  // ISNet's signature: input [1,3,1024,1024] (f32, or f16 cast to f32 inside), first output the
  // mask Sigmoid(ReduceMean_c(input)), a second output as ISNet has several.
  std::string write_model(const std::string& name, int32_t input_type = onnx::TensorProto::FLOAT,
                          const std::vector<int64_t>& dims = {1, 3, 1024, 1024}) const {
    OnnxBuilder b;
    b.input("input", input_type, dims).output("output").output("side");
    std::string x = "input";
    if (input_type != onnx::TensorProto::FLOAT) {
      testing::set_attr(b.node("Cast", {"input"}, {"x32"}), "to", int64_t{onnx::TensorProto::FLOAT});
      x = "x32";
    }
    auto& mean = b.node("ReduceMean", {x}, {"mean"});
    testing::set_attr(mean, "axes", std::vector<int64_t>{1});
    testing::set_attr(mean, "keepdims", int64_t{1});
    b.node("Sigmoid", {"mean"}, {"output"});
    b.node("Neg", {"mean"}, {"side"});
    std::ofstream(path(name), std::ios::binary) << b.bytes();
    return path(name);
  }
  // An RGB PNG whose pixel (x, y) is f(x, y) = {r, g, b}.
  std::string write_png(const std::string& name, int w, int h,
                        const std::function<std::array<uint8_t, 3>(int, int)>& f) const {
    std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const auto rgb = f(x, y);
        std::copy(rgb.begin(), rgb.end(), px.begin() + (static_cast<ptrdiff_t>(y) * w + x) * 3);
      }
    EXPECT_NE(stbi_write_png(path(name).c_str(), w, h, 3, px.data(), w * 3), 0);
    return path(name);
  }
  static Image read_png(const std::string& file) {
    Image im;
    stbi_uc* p = stbi_load(file.c_str(), &im.w, &im.h, &im.channels, 0);
    if (!p) {
      ADD_FAILURE() << "cannot read " << file << ": " << stbi_failure_reason();
      return im;
    }
    im.px.assign(p, p + static_cast<size_t>(im.w) * im.h * im.channels);
    stbi_image_free(p);
    return im;
  }

  fs::path dir_;
};

#define EXPECT_EXIT_CODE(p, c) EXPECT_EQ((p).code, (c)) << (p).out

// At the model's resolution both resizes are the identity: every mask pixel follows the formula,
// which checks the channel order, the normalization and the NCHW layout.
TEST_F(RemoveBackground, MaskAndCutoutFollowTheModelPixelByPixel) {
  const std::string model = write_model("m.onnx");
  auto pattern = [](int x, int y) {
    return std::array<uint8_t, 3>{static_cast<uint8_t>(x), static_cast<uint8_t>(y * 3), static_cast<uint8_t>(x ^ y)};
  };
  const std::string img = write_png("photo.png", 1024, 1024, pattern);
  const Proc p = run(model + " " + img + " --threads 2 --save-input " + path("x.npy"));
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_THAT(p.out, HasSubstr("image: " + img + ", 1024x1024"));
  EXPECT_THAT(p.out, HasSubstr("mask f32[1,1,1024,1024]: min "));
  EXPECT_THAT(p.out, HasSubstr("import + compile"));

  const Image mask = read_png(path("photo-mask.png")), cut = read_png(path("photo-cutout.png"));
  ASSERT_EQ(mask.channels, 1);
  ASSERT_EQ(cut.channels, 4);
  ASSERT_EQ(mask.w, 1024);
  ASSERT_EQ(mask.h, 1024);
  ASSERT_EQ(cut.w, 1024);
  ASSERT_EQ(cut.h, 1024);
  int worst = 0, rgb_mismatches = 0, alpha_mismatches = 0;
  for (int y = 0; y < 1024; ++y)
    for (int x = 0; x < 1024; ++x) {
      const auto c = pattern(x, y);
      worst = std::max(worst, std::abs(mask.at(x, y, 0) - expected_mask(c[0], c[1], c[2])));
      for (int k = 0; k < 3; ++k) rgb_mismatches += cut.at(x, y, k) != c[static_cast<size_t>(k)];
      alpha_mismatches += cut.at(x, y, 3) != mask.at(x, y, 0);
    }
  EXPECT_LE(worst, 1);
  EXPECT_EQ(rgb_mismatches, 0);
  EXPECT_EQ(alpha_mismatches, 0);

  const Tensor x = load_npy(path("x.npy"));  // (pixel - 128) / 256, NCHW
  ASSERT_EQ(x.shape(), (std::vector<int64_t>{1, 3, 1024, 1024}));
  const float* v = x.data<float>();
  const size_t plane = 1024 * 1024, at = 5 * 1024 + 7;  // (x 7, y 5)
  EXPECT_FLOAT_EQ(v[at], (7 - 128) / 256.0f);
  EXPECT_FLOAT_EQ(v[plane + at], (15 - 128) / 256.0f);
  EXPECT_FLOAT_EQ(v[2 * plane + at], ((7 ^ 5) - 128) / 256.0f);
}

// A small non-square image: the mask comes back at the image's size, not transposed; an f16 input
// takes the preprocessed values converted (they are exact in f16).
TEST_F(RemoveBackground, MaskIsResizedBackToTheImage) {
  const std::string img = write_png("two.png", 40, 30, [](int x, int) {
    return x < 20 ? std::array<uint8_t, 3>{10, 20, 30} : std::array<uint8_t, 3>{250, 240, 230};
  });
  for (const int32_t type : {onnx::TensorProto::FLOAT, onnx::TensorProto::FLOAT16}) {
    SCOPED_TRACE(type);
    const std::string model = write_model("m" + std::to_string(type) + ".onnx", type);
    const Proc p = run(model + " " + img + " --out-mask " + path("m.png") + " --out-cutout " + path("c.png"));
    ASSERT_EQ(p.code, 0) << p.out;
    const Image mask = read_png(path("m.png"));
    ASSERT_EQ(mask.channels, 1);
    ASSERT_EQ(mask.w, 40);
    ASSERT_EQ(mask.h, 30);
    for (int y = 0; y < 30; ++y) {
      for (int x = 0; x < 18; ++x) ASSERT_NEAR(mask.at(x, y, 0), expected_mask(10, 20, 30), 1) << x << "," << y;
      for (int x = 22; x < 40; ++x) ASSERT_NEAR(mask.at(x, y, 0), expected_mask(250, 240, 230), 1) << x << "," << y;
    }
    EXPECT_EQ(read_png(path("c.png")).w, 40);
  }
}

TEST_F(RemoveBackground, FailuresAreMessagesNotCrashes) {
  const std::string model = write_model("m.onnx");
  const std::string img = write_png("small.png", 8, 8, [](int, int) { return std::array<uint8_t, 3>{1, 2, 3}; });

  Proc p = run(model + " " + path("nope.png"));
  EXPECT_EXIT_CODE(p, 1);
  EXPECT_THAT(p.out, HasSubstr("image file '" + path("nope.png") + "' not found"));

  std::ofstream(path("notes.png")) << "this is text, not a picture\n";
  p = run(model + " " + path("notes.png"));
  EXPECT_EXIT_CODE(p, 1);
  EXPECT_THAT(p.out, HasSubstr("cannot read image '" + path("notes.png") + "'"));

  p = run(path("none.onnx") + " " + img);
  EXPECT_EXIT_CODE(p, 1);
  EXPECT_THAT(p.out, HasSubstr("model file '" + path("none.onnx") + "' not found"));

  std::ofstream(path("junk.onnx")) << "not a protobuf";
  p = run(path("junk.onnx") + " " + img);
  EXPECT_EXIT_CODE(p, 1);
  EXPECT_THAT(p.out, HasSubstr("error: "));

  p = run(write_model("gray.onnx", onnx::TensorProto::FLOAT, {1, 1, 64, 64}) + " " + img);
  EXPECT_EXIT_CODE(p, 1);
  EXPECT_THAT(p.out, HasSubstr("input 'input' is f32[1,1,64,64]; expected a float image [1,3,H,W]"));

  p = run(model + " " + img + " --device nosuchdevice");
  EXPECT_EXIT_CODE(p, 1);
  EXPECT_THAT(p.out, HasSubstr("error: "));

  p = run(model + " " + img + " --out-mask " + path("no/such/dir/m.png"));
  EXPECT_EXIT_CODE(p, 1);
  EXPECT_THAT(p.out, HasSubstr("cannot write"));

  p = run(model);
  EXPECT_EXIT_CODE(p, 2);
  EXPECT_THAT(p.out, HasSubstr("usage: "));
  p = run(model + " " + img + " --threads lots");
  EXPECT_EXIT_CODE(p, 2);
}

}  // namespace
}  // namespace rlx

#else

TEST(RemoveBackground, NotBuilt) { GTEST_SKIP() << "examples/remove_background is not built (no libstb-dev)"; }

#endif
