// Resize (nearest / n-linear, every coordinate transform) and Pad (constant / reflect / edge,
// negative pads) against naive double references.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::all_close;
using testing::error_message;
using testing::random_tensor;
using testing::ravel;
using testing::run_cpu1;
using testing::to_doubles;
using testing::unravel;

template <class OpT>
Tensor run1(const OpT& op, const Tensor& x) {
  Graph g;
  g.add_output(g.apply(op, {g.input("x", x.shape_info())}));
  return run_cpu1(g, {{"x", x}});
}

template <class OpT>
std::string build_error(const OpT& op, const Shape& x) {
  return error_message([&] {
    Graph g;
    g.apply(op, {g.input("x", x)});
  });
}

const ResizeCoord kCoords[] = {ResizeCoord::HalfPixel, ResizeCoord::Asymmetric, ResizeCoord::AlignCorners,
                               ResizeCoord::PytorchHalfPixel};
const NearestRound kRounds[] = {NearestRound::RoundPreferFloor, NearestRound::RoundPreferCeil, NearestRound::Floor,
                                NearestRound::Ceil};

// ---- Resize reference ----------------------------------------------------------------
// ONNX coordinate transforms; length_resized is the output length of the axis.
double ref_coord(ResizeCoord c, int64_t o, double scale, int64_t in, int64_t out) {
  const double x = static_cast<double>(o);
  if (c == ResizeCoord::Asymmetric) return x / scale;
  if (c == ResizeCoord::AlignCorners) return out == 1 ? 0.0 : x * static_cast<double>(in - 1) / static_cast<double>(out - 1);
  if (c == ResizeCoord::PytorchHalfPixel && out == 1) return 0.0;
  return (x + 0.5) / scale - 0.5;
}

int64_t ref_round(NearestRound m, double x) {
  const double fl = std::floor(x), frac = x - fl;
  switch (m) {
    case NearestRound::Floor: return static_cast<int64_t>(fl);
    case NearestRound::Ceil: return static_cast<int64_t>(frac > 0 ? fl + 1 : fl);
    case NearestRound::RoundPreferFloor: return static_cast<int64_t>(frac <= 0.5 ? fl : fl + 1);
    case NearestRound::RoundPreferCeil: return static_cast<int64_t>(frac < 0.5 ? fl : fl + 1);
  }
  return 0;
}

std::vector<double> ref_resize(const ops::Resize& op, const std::vector<double>& x, const std::vector<int64_t>& xd,
                               std::vector<int64_t>& yd) {
  const size_t r = xd.size();
  std::vector<double> scale(r);
  yd.resize(r);
  for (size_t a = 0; a < r; ++a) {
    yd[a] = op.sizes.empty() ? static_cast<int64_t>(std::floor(static_cast<double>(xd[a]) * op.scales[a])) : op.sizes[a];
    scale[a] = op.sizes.empty() ? op.scales[a] : static_cast<double>(yd[a]) / static_cast<double>(xd[a]);
  }
  std::vector<double> y;
  for (int64_t oi = 0; oi < product(yd); ++oi) {
    const auto o = unravel(oi, yd);
    std::vector<int64_t> i0(r), i1(r);
    std::vector<double> f(r, 0.0);
    for (size_t a = 0; a < r; ++a) {
      const double c = ref_coord(op.coord, o[a], scale[a], xd[a], yd[a]);
      if (op.mode == ResizeMode::Nearest) {
        i0[a] = i1[a] = std::min<int64_t>(std::max<int64_t>(ref_round(op.nearest, c), 0), xd[a] - 1);
      } else {
        const double cc = std::min(std::max(c, 0.0), static_cast<double>(xd[a] - 1));
        i0[a] = static_cast<int64_t>(std::floor(cc));
        i1[a] = std::min<int64_t>(i0[a] + 1, xd[a] - 1);
        f[a] = cc - static_cast<double>(i0[a]);
      }
    }
    double v = 0;
    for (uint32_t m = 0; m < (1u << r); ++m) {  // every corner of the n-linear cell
      double wgt = 1;
      std::vector<int64_t> idx(r);
      for (size_t a = 0; a < r; ++a) {
        const bool hi = (m >> a) & 1u;
        wgt *= hi ? f[a] : 1.0 - f[a];
        idx[a] = hi ? i1[a] : i0[a];
      }
      if (wgt != 0) v += wgt * x[ravel(idx, xd)];
    }
    y.push_back(v);
  }
  return y;
}

void check_resize(const ops::Resize& op, const std::vector<int64_t>& xd, DType dt, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " " + enum_name(op.mode) + " " + enum_name(op.coord) + " " +
               enum_name(op.nearest) + " x" + dims_str(xd) + " sizes " + dims_str(op.sizes));
  const Tensor x = random_tensor(dt, xd, seed, is_float(dt) ? -3.0 : 0.0, is_float(dt) ? 3.0 : 100.0);
  std::vector<int64_t> yd;
  const auto ref = ref_resize(op, to_doubles(x), xd, yd);
  const Tensor y = run1(op, x);
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_TRUE(all_close(y, yd, ref));
}

ops::Resize make_resize(ResizeMode mode, ResizeCoord coord, NearestRound rnd, std::vector<double> scales,
                        std::vector<int64_t> sizes = {}) {
  ops::Resize op;
  op.mode = mode;
  op.coord = coord;
  op.nearest = rnd;
  op.scales = std::move(scales);
  op.sizes = std::move(sizes);
  return op;
}

TEST(Resize, NearestEveryRoundingAndCoord) {
  uint64_t seed = 1;
  for (ResizeCoord c : kCoords)
    for (NearestRound rnd : kRounds) {
      check_resize(make_resize(ResizeMode::Nearest, c, rnd, {1, 1, 2, 0.5}), {1, 2, 6, 4}, DType::F32, seed++);
      check_resize(make_resize(ResizeMode::Nearest, c, rnd, {1, 1, 0.5, 2.5}), {1, 2, 6, 4}, DType::F32, seed++);
      check_resize(make_resize(ResizeMode::Nearest, c, rnd, {}, {1, 2, 3, 9}), {1, 2, 5, 7}, DType::F16, seed++);
      check_resize(make_resize(ResizeMode::Nearest, c, rnd, {}, {1, 4}), {3, 5}, DType::F64, seed++);
    }
}

TEST(Resize, NearestAnyDtype) {
  uint64_t seed = 50;
  for (DType dt : {DType::I32, DType::U8, DType::I64, DType::Bool, DType::BF16})
    check_resize(make_resize(ResizeMode::Nearest, ResizeCoord::Asymmetric, NearestRound::Floor, {1, 2, 1.5}),
                 {2, 3, 4}, dt, seed++);
}

TEST(Resize, LinearEveryCoordUpAndDown) {
  uint64_t seed = 100;
  for (ResizeCoord c : kCoords)
    for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      check_resize(make_resize(ResizeMode::Linear, c, {}, {1, 1, 1.5, 0.5}), {2, 3, 4, 5}, dt, seed++);
      check_resize(make_resize(ResizeMode::Linear, c, {}, {2, 0.5, 1.7}), {3, 4, 5}, dt, seed++);
      check_resize(make_resize(ResizeMode::Linear, c, {}, {}, {1, 3}), {4, 5}, dt, seed++);
      check_resize(make_resize(ResizeMode::Linear, c, {}, {}, {7, 2}), {3, 6}, dt, seed++);
    }
}

// f32 linear resizes over batch and channel planes take the row path (interpolated input rows
// kept and reused); f64 takes the generic loop. Both follow the same formula: the special values
// (NaN, infinities, signed zeros) land on the same outputs, and the values agree.
TEST(Resize, LinearRowPathMatchesTheGenericLoop) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (ResizeCoord c : {ResizeCoord::HalfPixel, ResizeCoord::AlignCorners, ResizeCoord::Asymmetric}) {
    for (const std::vector<double>& scales : {std::vector<double>{1, 1, 2, 2}, std::vector<double>{1, 1, 1.5, 0.75},
                                              std::vector<double>{1, 1, 1, 3}, std::vector<double>{1, 1, 0.5, 1}}) {
      SCOPED_TRACE(std::string(enum_name(c)) + " scales " + std::to_string(scales[2]) + "," + std::to_string(scales[3]));
      std::vector<double> v = to_doubles(random_tensor(DType::F32, {2, 3, 6, 9}, 5));
      v[4] = nan;
      v[60] = inf;
      v[61] = -inf;
      for (size_t i = 120; i < 140; ++i) v[i] = -0.0;
      const ops::Resize op = make_resize(ResizeMode::Linear, c, {}, scales);
      const auto y32 = to_doubles(run1(op, testing::from_doubles(DType::F32, {2, 3, 6, 9}, v)));
      const auto y64 = to_doubles(run1(op, testing::from_doubles(DType::F64, {2, 3, 6, 9}, v)));
      ASSERT_EQ(y32.size(), y64.size());
      for (size_t i = 0; i < y32.size(); ++i) {
        if (std::isnan(y64[i])) {
          EXPECT_TRUE(std::isnan(y32[i])) << i;
        } else if (std::isinf(y64[i]) || y64[i] == 0) {
          EXPECT_EQ(y32[i], y64[i]) << i;
          EXPECT_EQ(std::signbit(y32[i]), std::signbit(y64[i])) << i;
        } else {
          EXPECT_NEAR(y32[i], y64[i], 1e-6 * (1 + std::abs(y64[i]))) << i;
        }
      }
    }
  }
}

TEST(Resize, KnownValues) {
  const float q[] = {1, 2, 3, 4};
  const Tensor x = Tensor::f32({1, 1, 2, 2}, q);
  // ONNX resize_upsample_scales_nearest.
  EXPECT_TRUE(all_close(run1(make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, NearestRound::RoundPreferFloor,
                                         {1, 1, 2, 3}),
                             x),
                        {1, 1, 4, 6}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}));
  // torch bilinear, align_corners=False.
  EXPECT_TRUE(all_close(run1(make_resize(ResizeMode::Linear, ResizeCoord::PytorchHalfPixel, {}, {1, 1, 2, 2}), x),
                        {1, 1, 4, 4},
                        {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}));
  // align_corners: x_src = o * (in - 1) / (out - 1).
  const double t = 1.0 / 3, u = 2.0 / 3;
  EXPECT_TRUE(all_close(run1(make_resize(ResizeMode::Linear, ResizeCoord::AlignCorners, {}, {}, {1, 1, 4, 4}), x),
                        {1, 1, 4, 4},
                        {1, 1 + t, 1 + u, 2, 1 + u, 2, 2 + t, 2 + u, 2 + t, 2 + u, 3, 3 + t, 3, 3 + t, 3 + u, 4}));
  // ONNX resize_downsample_scales_linear.
  const float r[] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_TRUE(all_close(run1(make_resize(ResizeMode::Linear, ResizeCoord::HalfPixel, {}, {1, 1, 0.6, 0.6}),
                             Tensor::f32({1, 1, 2, 4}, r)),
                        {1, 1, 1, 2}, {2.6666666666666665, 4.333333333333333}));
  // torch nearest (asymmetric + floor), 1-d.
  const float s[] = {1, 2, 3};
  EXPECT_TRUE(all_close(run1(make_resize(ResizeMode::Nearest, ResizeCoord::Asymmetric, NearestRound::Floor, {2}),
                             Tensor::f32({3}, s)),
                        {6}, {1, 1, 2, 2, 3, 3}));
}

TEST(Resize, ZeroSizeAndSymbolic) {
  EXPECT_EQ(run1(make_resize(ResizeMode::Linear, ResizeCoord::HalfPixel, {}, {1, 2}), Tensor::empty(DType::F32, {0, 3}))
                .shape(),
            (std::vector<int64_t>{0, 6}));
  const auto op = make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, {}, {1, 2});
  EXPECT_EQ(infer_op(op, std::vector<Shape>{Shape({Dim::symbol("b"), 3})})[0], Shape({Dim::symbol("b"), 6}));
  EXPECT_EQ(infer_op(make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, {}, {}, {2, 5}),
                     std::vector<Shape>{Shape({Dim::symbol("b"), 3})})[0],
            Shape::of({2, 5}));
  EXPECT_THAT(error_message([&] { infer_op(op, std::vector<Shape>{Shape({3, Dim::symbol("w")})}); }),
              HasSubstr("symbolic"));
}

TEST(Resize, BadInputs) {
  EXPECT_THAT(build_error(make_resize(ResizeMode::Linear, ResizeCoord::HalfPixel, {}, {2, 2}), Shape::of({2, 2}, DType::I32)),
              HasSubstr("float tensor"));
  EXPECT_THAT(build_error(make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, {}, {2}), Shape::of({2, 2})),
              HasSubstr("one value per dim"));
  EXPECT_THAT(build_error(make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, {}, {1, 0}), Shape::of({2, 2})),
              HasSubstr("> 0"));
  EXPECT_THAT(build_error(make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, {}, {1, -2}), Shape::of({2, 2})),
              HasSubstr("> 0"));
  EXPECT_THAT(build_error(make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, {}, {}), Shape::of({2, 2})),
              HasSubstr("both are empty"));
  EXPECT_THAT(build_error(make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, {}, {}, {2}), Shape::of({2, 2})),
              HasSubstr("one value per dim"));
  EXPECT_THAT(build_error(make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, {}, {}, {2, -1}), Shape::of({2, 2})),
              HasSubstr(">= 0"));
  EXPECT_THAT(build_error(make_resize(ResizeMode::Nearest, ResizeCoord::HalfPixel, {}, {}, {2, 3}), Shape::of({2, 0})),
              HasSubstr("cannot grow the empty dim 1"));
}

// ---- Pad ---------------------------------------------------------------------------------
// Crop by the negative pads, then pad by the positive ones (numpy semantics on the cropped data).
std::vector<double> ref_pad(const std::vector<double>& x, const std::vector<int64_t>& xd,
                            const std::vector<int64_t>& pads, PadMode mode, double value, std::vector<int64_t>& yd) {
  const size_t r = xd.size();
  std::vector<int64_t> cd(r), crop_b(r), grow_b(r);
  yd.resize(r);
  for (size_t a = 0; a < r; ++a) {
    const int64_t pb = pads.empty() ? 0 : pads[a], pe = pads.empty() ? 0 : pads[r + a];
    crop_b[a] = std::max<int64_t>(-pb, 0);
    grow_b[a] = std::max<int64_t>(pb, 0);
    cd[a] = xd[a] - crop_b[a] - std::max<int64_t>(-pe, 0);
    yd[a] = cd[a] + grow_b[a] + std::max<int64_t>(pe, 0);
  }
  std::vector<double> cropped;
  for (int64_t i = 0; i < product(cd); ++i) {
    auto idx = unravel(i, cd);
    for (size_t a = 0; a < r; ++a) idx[a] += crop_b[a];
    cropped.push_back(x[ravel(idx, xd)]);
  }
  std::vector<double> y;
  for (int64_t oi = 0; oi < product(yd); ++oi) {
    auto idx = unravel(oi, yd);
    bool fill = false;
    for (size_t a = 0; a < r; ++a) {
      int64_t j = idx[a] - grow_b[a];
      const int64_t n = cd[a];
      if (j >= 0 && j < n) {
        idx[a] = j;
        continue;
      }
      if (mode == PadMode::Constant) fill = true;
      else if (mode == PadMode::Edge) j = j < 0 ? 0 : n - 1;
      else j = j < 0 ? -j : 2 * n - 2 - j;
      idx[a] = j;
    }
    y.push_back(fill ? value : cropped[ravel(idx, cd)]);
  }
  return y;
}

void check_pad(PadMode mode, const std::vector<int64_t>& xd, const std::vector<int64_t>& pads, DType dt, double value,
               uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " " + enum_name(mode) + " x" + dims_str(xd) + " pads " + dims_str(pads));
  ops::Pad op;
  op.mode = mode;
  op.pads = pads;
  op.value = value;
  const Tensor x = random_tensor(dt, xd, seed, is_float(dt) ? -3.0 : 0.0, is_float(dt) ? 3.0 : 100.0);
  std::vector<int64_t> yd;
  const double cast_value = to_doubles(testing::from_doubles(dt, {1}, {value}))[0];
  const auto ref = ref_pad(to_doubles(x), xd, pads, mode, cast_value, yd);
  const Tensor y = run1(op, x);
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_TRUE(all_close(y, yd, ref));
}

TEST(Pad, AllModesAllDtypes) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{3, 4, 5}, {1, 0, 2, 2, 1, 1}},
      {{4, 5, 6}, {-1, 2, 0, 1, -2, -3}},  // crops, then pads the cropped data
      {{7}, {6, 6}},                        // reflect up to dim - 1
      {{2, 3}, {}},                         // no pads
      {{3, 4}, {-1, 0, -2, 0}},             // crops to an empty axis
  };
  const DType dtypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8,
                          DType::I32, DType::I64, DType::U8,  DType::U32, DType::Bool};
  uint64_t seed = 1;
  for (const auto& [xd, pads] : cases)
    for (PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Edge})
      for (DType dt : dtypes) {
        const double v = is_float(dt) ? 2.5 : (dt == DType::Bool ? 1.0 : (is_signed_int(dt) ? -3.0 : 7.0));
        check_pad(mode, xd, pads, dt, v, seed++);
      }
}

TEST(Pad, KnownValues) {
  const float v[] = {1, 2, 3, 4};
  const Tensor x = Tensor::f32({4}, v);
  ops::Pad op;
  op.pads = {2, 3};
  op.mode = PadMode::Reflect;
  EXPECT_TRUE(all_close(run1(op, x), {9}, {3, 2, 1, 2, 3, 4, 3, 2, 1}));
  op.mode = PadMode::Edge;
  EXPECT_TRUE(all_close(run1(op, x), {9}, {1, 1, 1, 2, 3, 4, 4, 4, 4}));
  op.mode = PadMode::Constant;
  op.pads = {-1, 2};
  op.value = 9;
  EXPECT_TRUE(all_close(run1(op, x), {5}, {2, 3, 4, 9, 9}));
  const int32_t iv[] = {5, 6};
  op.pads = {1, 1};
  op.value = -2.7;  // truncates toward zero like Cast
  EXPECT_TRUE(all_close(run1(op, Tensor::i32({2}, iv)), {4}, {-2, 5, 6, -2}));
  ops::Pad scalar;
  EXPECT_TRUE(all_close(run1(scalar, Tensor::scalar_f32(4)), {}, {4}));
}

TEST(Pad, SymbolicPassThrough) {
  ops::Pad op;
  op.pads = {0, 1, 0, 1};
  EXPECT_EQ(infer_op(op, std::vector<Shape>{Shape({Dim::symbol("b"), 3})})[0], Shape({Dim::symbol("b"), 5}));
  op.pads = {1, 0, 0, 0};
  EXPECT_THAT(error_message([&] { infer_op(op, std::vector<Shape>{Shape({Dim::symbol("b"), 3})}); }),
              HasSubstr("symbolic"));
}

TEST(Pad, BadInputs) {
  ops::Pad op;
  op.mode = PadMode::Reflect;
  op.pads = {0, 3, 0, 0};
  EXPECT_THAT(build_error(op, Shape::of({2, 3})), HasSubstr("reflect pad 3 must be smaller than dim 1"));
  op.pads = {0, 1, 0, -2};
  EXPECT_THAT(build_error(op, Shape::of({2, 3})), HasSubstr("size 1 after cropping"));
  op.mode = PadMode::Edge;
  op.pads = {0, 1, 0, -3};
  EXPECT_THAT(build_error(op, Shape::of({2, 3})), HasSubstr("edge pad of dim 1"));
  op.mode = PadMode::Constant;
  op.pads = {0, -2, 0, -2};
  EXPECT_THAT(build_error(op, Shape::of({2, 3})), HasSubstr("crops more than dim 1"));
  op.pads = {1, 1};
  EXPECT_THAT(build_error(op, Shape::of({2, 3})), HasSubstr("have 4 values"));
  op.pads = {1, 1};
  op.value = 300;
  EXPECT_THAT(build_error(op, Shape::of({2}, DType::U8)), HasSubstr("not representable in u8"));
  op.value = std::nan("");
  EXPECT_THAT(build_error(op, Shape::of({2}, DType::I32)), HasSubstr("not representable in i32"));
  op.value = -1;
  EXPECT_THAT(build_error(op, Shape::of({2}, DType::U32)), HasSubstr("not representable in u32"));
}

}  // namespace
}  // namespace rlx
