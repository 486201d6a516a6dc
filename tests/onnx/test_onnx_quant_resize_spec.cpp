// DynamicQuantizeLinear and Resize against scalar references written from the ONNX operator
// definitions (issue 26, item 18): every attribute combination rlx supports is compared
// element by element; combinations it does not support must be an rlx::Error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "onnx/onnx_builder.h"
#include "rlx/onnx.h"
#include "rlx/session.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;

Graph import(const OnnxBuilder& b) { return testing::import_built(b); }

// ---- DynamicQuantizeLinear ---------------------------------------------------------------

// Round half to even in float32 (the operator's rounding).
float round_even(float v) {
  const float f = std::floor(v);
  const float d = v - f;
  if (d < 0.5f) return f;
  if (d > 0.5f) return f + 1;
  return std::fmod(f, 2.0f) == 0 ? f : f + 1;
}

struct DqlRef {
  std::vector<uint8_t> y;
  float scale;
  uint8_t zp;
};

// The definition, every step in float32:
//   x_min = min(0, min x), x_max = max(0, max x), y_scale = (x_max - x_min) / 255
//   zp = saturate(round(0 - x_min / y_scale)), y = saturate(round(x / y_scale) + zp)
DqlRef dql_reference(const std::vector<float>& x) {
  float lo = 0, hi = 0;
  for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
  DqlRef r;
  r.scale = (hi - lo) / 255.0f;
  const float div = r.scale == 0 ? 1.0f : r.scale;  // all-zero x: everything 0
  const float zp = std::clamp(round_even(0.0f - lo / div), 0.0f, 255.0f);
  r.zp = static_cast<uint8_t>(zp);
  for (float v : x) r.y.push_back(static_cast<uint8_t>(std::clamp(round_even(v / div) + zp, 0.0f, 255.0f)));
  return r;
}

void check_dql(const std::vector<float>& x) {
  OnnxBuilder b(20);
  b.input("x", kF32, {static_cast<int64_t>(x.size())}).output("y", onnx::TensorProto::UINT8).output("s").output("z", onnx::TensorProto::UINT8);
  b.node("DynamicQuantizeLinear", {"x"}, {"y", "s", "z"}, "dql");
  const auto out = testing::run_cpu(import(b), {{"x", Tensor::f32({static_cast<int64_t>(x.size())}, x)}});
  const DqlRef ref = dql_reference(x);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].to_f64()[0], static_cast<double>(ref.scale));
  EXPECT_EQ(out[2].to_i64()[0], ref.zp);
  const auto y = out[0].to_i64();
  ASSERT_EQ(y.size(), ref.y.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], ref.y[i]) << "element " << i << " x=" << x[i];
}

TEST(OnnxQuantResizeSpec, DynamicQuantizeLinearHalfwayValues) {
  // x values at (k + 0.5) * scale in float32: their quotients sit on (or within an ulp of) the
  // halfway points, where float32 and float64 division round differently.
  for (float hi : {255.0f, 1.0f, 3.7f, 0.013f}) {
    const float scale = hi / 255.0f;
    std::vector<float> x{0.0f, hi};
    for (int k = 0; k < 255; ++k) x.push_back((static_cast<float>(k) + 0.5f) * scale);
    check_dql(x);
  }
  // Negative minimum: the zero point comes from -x_min / scale.
  for (float lo : {-1.0f, -0.37f, -100.5f}) {
    std::vector<float> x{lo, 2.0f, 0.5f * lo};
    const float scale = (2.0f - lo) / 255.0f;
    for (int k = -100; k < 100; ++k) x.push_back((static_cast<float>(k) + 0.5f) * scale);
    check_dql(x);
  }
  check_dql({0.0f, 0.0f, 0.0f});               // scale 0
  check_dql({-3.0f, -1.0f, -2.5f});            // all negative: x_max adjusted to 0
  check_dql({1.0f, 2.0f, 3.0f});               // all positive: x_min adjusted to 0
  std::vector<float> r;
  const Tensor t = testing::random_tensor(DType::F32, {4096}, 7, -3.0, 5.0);
  for (double v : t.to_f64()) r.push_back(static_cast<float>(v));
  check_dql(r);
}

TEST(OnnxQuantResizeSpec, DynamicQuantizeLinearRejectsOtherTypes) {
  OnnxBuilder b(20);
  b.input("x", onnx::TensorProto::DOUBLE, {3}).output("y").output("s").output("z");
  b.node("DynamicQuantizeLinear", {"x"}, {"y", "s", "z"}, "dql");
  try {
    import(b);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("ONNX node 'dql'"));
    EXPECT_THAT(e.what(), HasSubstr("must be float32"));
  }
}

// QuantizeLinear (float32 x and scale, uint8 zero point): y = saturate(round(x / y_scale) + zp)
// with the division in float32 (y_scale's type) and round half to even.
TEST(OnnxQuantResizeSpec, QuantizeLinearHalfwayValues) {
  for (float scale : {1.0f / 255.0f, 0.37f, 3.7f / 255.0f}) {
    std::vector<float> x;
    for (int k = -20; k < 300; ++k) x.push_back((static_cast<float>(k) + 0.5f) * scale);
    const int64_t n = static_cast<int64_t>(x.size());
    OnnxBuilder b(21);
    b.input("x", kF32, {n}).output("y", onnx::TensorProto::UINT8);
    b.initializer("s", Tensor::scalar_f32(scale));
    b.initializer("z", testing::from_doubles(DType::U8, {}, {7}));
    b.node("QuantizeLinear", {"x", "s", "z"}, {"y"}, "q");
    const Tensor y = testing::run_cpu1(import(b), {{"x", Tensor::f32({n}, x)}});
    const auto yv = y.to_i64();
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = std::clamp(round_even(x[i] / scale) + 7.0f, 0.0f, 255.0f);
      EXPECT_EQ(yv[i], static_cast<int64_t>(want)) << "x=" << x[i] << " scale=" << scale;
    }
  }
}

// ---- Resize --------------------------------------------------------------------------------

struct ResizeCase {
  std::string mode = "nearest", coord = "half_pixel", nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
  std::vector<double> scales;   // per dim (or empty)
  std::vector<int64_t> sizes;   // per dim (or empty)
  std::vector<double> roi;      // 2 * rank, tf_crop_and_resize only
};

// The source coordinate of output index x on one axis (coordinate_transformation_mode), where
// length_resized is scale * length_original (fractional when scales are given, as in the
// operator's reference), and the output length is floor(length_original * scale) or sizes.
double source_coord(const ResizeCase& rc, double x, double scale, double in, double out_f, int64_t out_int,
                    double r0, double r1, bool& extrapolate) {
  extrapolate = false;
  const std::string& c = rc.coord;
  if (c == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (c == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out_int) / out_f;
    const double offset = in / 2 * (1 - adjustment);
    return offset + (x + 0.5) / scale - 0.5;
  }
  if (c == "pytorch_half_pixel") return out_f > 1 ? (x + 0.5) / scale - 0.5 : -0.5;
  if (c == "align_corners") return out_f == 1 ? 0.0 : x * (in - 1) / (out_f - 1);
  if (c == "asymmetric") return x / scale;
  // tf_crop_and_resize
  double xo = out_f > 1 ? r0 * (in - 1) + x * (r1 - r0) * (in - 1) / (out_f - 1) : 0.5 * (r0 + r1) * (in - 1);
  if (xo < 0 || xo > in - 1) extrapolate = true;
  return xo;
}

double cubic_kernel(double a, double s) {
  s = std::fabs(s);
  if (s <= 1) return (a + 2) * s * s * s - (a + 3) * s * s + 1;
  if (s < 2) return a * s * s * s - 5 * a * s * s + 8 * a * s - 4 * a;
  return 0;
}

// One axis: out[i] = sum_j w[i][j] * in[j] (+ extrapolated constant), from the definition.
void axis_weights(const ResizeCase& rc, int64_t axis, int64_t in, int64_t out, double scale, size_t rank,
                  std::vector<std::vector<double>>& w, std::vector<bool>& extra) {
  w.assign(static_cast<size_t>(out), std::vector<double>(static_cast<size_t>(in), 0.0));
  extra.assign(static_cast<size_t>(out), false);
  const double in_d = static_cast<double>(in);
  const double out_f = rc.sizes.empty() ? scale * in_d : static_cast<double>(out);
  const double r0 = rc.roi.empty() ? 0 : rc.roi[static_cast<size_t>(axis)];
  const double r1 = rc.roi.empty() ? 1 : rc.roi[static_cast<size_t>(axis) + rank];
  auto clampi = [&](int64_t j) { return std::clamp<int64_t>(j, 0, in - 1); };
  for (int64_t i = 0; i < out; ++i) {
    bool ex = false;
    const double xo = source_coord(rc, static_cast<double>(i), scale, in_d, out_f, out, r0, r1, ex);
    auto& row = w[static_cast<size_t>(i)];
    if (ex) {
      extra[static_cast<size_t>(i)] = true;
      continue;
    }
    if (rc.mode == "nearest") {
      double r;
      const double f = std::floor(xo);
      if (rc.nearest == "floor") r = f;
      else if (rc.nearest == "ceil") r = std::ceil(xo);
      else if (xo - f == 0.5) r = rc.nearest == "round_prefer_floor" ? f : f + 1;
      else r = std::round(xo);
      row[static_cast<size_t>(clampi(static_cast<int64_t>(r)))] = 1.0;
    } else if (rc.mode == "linear") {
      const double xc = std::clamp(xo, 0.0, in_d - 1);  // outside: the edge value
      const int64_t j = static_cast<int64_t>(std::floor(xc));
      const double t = xc - static_cast<double>(j);
      row[static_cast<size_t>(j)] += 1 - t;
      row[static_cast<size_t>(clampi(j + 1))] += t;
    } else {  // cubic: taps floor-1 .. floor+2
      const int64_t j = static_cast<int64_t>(std::floor(xo));
      const double t = xo - static_cast<double>(j);
      double k[4], sum = 0;
      for (int m = 0; m < 4; ++m) {
        k[m] = cubic_kernel(rc.cubic_a, t - static_cast<double>(m - 1));
        const int64_t src = j - 1 + m;
        if (rc.exclude_outside && (src < 0 || src >= in)) k[m] = 0;
        sum += k[m];
      }
      for (int m = 0; m < 4; ++m) {
        const double km = rc.exclude_outside ? k[m] / sum : k[m];
        row[static_cast<size_t>(clampi(j - 1 + m))] += km;
      }
    }
  }
}

// The reference for a 4-d (1, 1, H, W) input resized on its last two axes.
std::vector<double> resize_reference(const ResizeCase& rc, const std::vector<double>& x, int64_t H, int64_t W,
                                     int64_t& OH, int64_t& OW) {
  auto out_len = [&](size_t a, int64_t in) {
    return rc.sizes.empty() ? static_cast<int64_t>(std::floor(rc.scales[a] * static_cast<double>(in))) : rc.sizes[a];
  };
  OH = out_len(2, H);
  OW = out_len(3, W);
  const double sh = rc.sizes.empty() ? rc.scales[2] : static_cast<double>(OH) / static_cast<double>(H);
  const double sw = rc.sizes.empty() ? rc.scales[3] : static_cast<double>(OW) / static_cast<double>(W);
  std::vector<std::vector<double>> wh, ww;
  std::vector<bool> eh, ew;
  axis_weights(rc, 2, H, OH, sh, 4, wh, eh);
  axis_weights(rc, 3, W, OW, sw, 4, ww, ew);
  std::vector<double> y;
  for (int64_t i = 0; i < OH; ++i)
    for (int64_t j = 0; j < OW; ++j) {
      if (eh[static_cast<size_t>(i)] || ew[static_cast<size_t>(j)]) {
        y.push_back(rc.extrapolation);
        continue;
      }
      double acc = 0;
      for (int64_t a = 0; a < H; ++a)
        for (int64_t b = 0; b < W; ++b)
          acc += wh[static_cast<size_t>(i)][static_cast<size_t>(a)] * ww[static_cast<size_t>(j)][static_cast<size_t>(b)] *
                 x[static_cast<size_t>(a * W + b)];
      y.push_back(acc);
    }
  return y;
}

OnnxBuilder resize_model(const ResizeCase& rc, int64_t H, int64_t W) {
  OnnxBuilder b(19);
  b.input("x", kF32, {1, 1, H, W}).output("y");
  std::string roi, scales, sizes;
  if (!rc.roi.empty()) {
    std::vector<float> r(rc.roi.begin(), rc.roi.end());
    b.initializer("roi", Tensor::f32({static_cast<int64_t>(r.size())}, r));
    roi = "roi";
  }
  if (!rc.scales.empty()) {
    std::vector<float> s(rc.scales.begin(), rc.scales.end());
    b.initializer("scales", Tensor::f32({4}, s));
    scales = "scales";
  } else {
    b.initializer("sizes", Tensor::i64({4}, rc.sizes));
    sizes = "sizes";
  }
  std::vector<std::string> ins{"x", roi, scales};
  if (!sizes.empty()) ins.push_back(sizes);
  auto& n = b.node("Resize", ins, {"y"}, "resize");
  set_attr(n, "mode", rc.mode);
  set_attr(n, "coordinate_transformation_mode", rc.coord);
  if (rc.mode == "nearest") set_attr(n, "nearest_mode", rc.nearest);
  if (rc.mode == "cubic") {
    set_attr(n, "cubic_coeff_a", static_cast<float>(rc.cubic_a));
    set_attr(n, "exclude_outside", int64_t{rc.exclude_outside ? 1 : 0});
  }
  if (rc.coord == "tf_crop_and_resize") set_attr(n, "extrapolation_value", static_cast<float>(rc.extrapolation));
  return b;
}

std::string describe(const ResizeCase& rc) {
  std::string s = rc.mode + "/" + rc.coord;
  if (rc.mode == "nearest") s += "/" + rc.nearest;
  if (rc.mode == "cubic") s += "/a=" + std::to_string(rc.cubic_a) + (rc.exclude_outside ? "/exclude_outside" : "");
  s += rc.scales.empty() ? " sizes " + std::to_string(rc.sizes[2]) + "x" + std::to_string(rc.sizes[3])
                         : " scales " + std::to_string(rc.scales[2]) + "x" + std::to_string(rc.scales[3]);
  return s;
}

TEST(OnnxQuantResizeSpec, ResizeEveryCombination) {
  const int64_t H = 4, W = 5;
  const Tensor xt = testing::random_tensor(DType::F32, {1, 1, H, W}, 11, -2.0, 2.0);
  const std::vector<double> x = xt.to_f64();
  struct Geometry {
    std::vector<double> scales;
    std::vector<int64_t> sizes;
  };
  const std::vector<Geometry> geoms = {
      {{1, 1, 2.0, 1.5}, {}},   // upsample by scales
      {{1, 1, 0.6, 0.5}, {}},   // downsample by fractional scales (2.4 and 2.5 output lengths)
      {{1, 1, 0.5, 0.8}, {}},   // downsample to whole lengths
      {{1, 1, 1.7, 0.3}, {}},   // mixed
      {{}, {1, 1, 7, 9}},       // upsample by sizes
      {{}, {1, 1, 3, 2}},       // downsample by sizes
      {{}, {1, 1, 1, 1}},       // to a single element
  };
  const std::vector<std::string> coords = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                           "asymmetric", "tf_crop_and_resize"};
  std::vector<ResizeCase> cases;
  for (const auto& coord : coords)
    for (const auto& geo : geoms) {
      ResizeCase base;
      base.coord = coord;
      base.scales = geo.scales;
      base.sizes = geo.sizes;
      if (coord == "tf_crop_and_resize") {
        if (base.sizes.empty()) continue;  // with scales: rejected (see ResizeRejectsUnsupported)
        base.roi = {0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3};
        base.extrapolation = 7.5;
      }
      for (const char* nm : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
        ResizeCase rc = base;
        rc.nearest = nm;
        cases.push_back(rc);
      }
      ResizeCase lin = base;
      lin.mode = "linear";
      cases.push_back(lin);
      for (double a : {-0.75, -0.5})
        for (bool ex : {false, true}) {
          ResizeCase cub = base;
          cub.mode = "cubic";
          cub.cubic_a = a;
          cub.exclude_outside = ex;
          cases.push_back(cub);
        }
    }
  // The model stores scales and roi as float32: the reference uses those values.
  for (auto& rc : cases) {
    for (double& v : rc.scales) v = static_cast<double>(static_cast<float>(v));
    for (double& v : rc.roi) v = static_cast<double>(static_cast<float>(v));
  }
  int checked = 0;
  for (const auto& rc : cases) {
    SCOPED_TRACE(describe(rc));
    int64_t OH = 0, OW = 0;
    const auto want = resize_reference(rc, x, H, W, OH, OW);
    Tensor y;
    try {
      y = testing::run_cpu1(import(resize_model(rc, H, W)), {{"x", xt}});
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_TRUE(testing::all_close(y, {1, 1, OH, OW}, want, {1e-4, 1e-5}));
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

TEST(OnnxQuantResizeSpec, ResizeRejectsUnsupported) {
  auto expect_fail = [](const OnnxBuilder& b, const std::string& what) {
    try {
      import(b);
      ADD_FAILURE() << "expected an error with '" << what << "'";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("ONNX node 'resize'"));
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  ResizeCase rc;
  rc.scales = {1, 1, 2, 2};
  rc.coord = "tf_crop_and_resize";
  rc.roi = {0, 0, 0.2, 0.2, 1, 1, 0.8, 0.8};
  expect_fail(resize_model(rc, 4, 5), "tf_crop_and_resize with scales");
  ResizeCase bad_coord;
  bad_coord.scales = {1, 1, 2, 2};
  bad_coord.coord = "sideways";
  expect_fail(resize_model(bad_coord, 4, 5), "coordinate_transformation_mode 'sideways'");
  ResizeCase bad_nearest;
  bad_nearest.scales = {1, 1, 2, 2};
  bad_nearest.nearest = "banker";
  expect_fail(resize_model(bad_nearest, 4, 5), "nearest_mode 'banker'");
  ResizeCase bad_mode;
  bad_mode.scales = {1, 1, 2, 2};
  bad_mode.mode = "quintic";
  expect_fail(resize_model(bad_mode, 4, 5), "mode 'quintic'");
  ResizeCase zero;
  zero.scales = {1, 1, 0, 2};
  expect_fail(resize_model(zero, 4, 5), "scales[2]");
}

}  // namespace
}  // namespace rlx
