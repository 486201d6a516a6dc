// Pool (max / avg, 1-3 spatial dims) against a naive double direct-loop reference.
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
using testing::from_doubles;
using testing::random_tensor;
using testing::ravel;
using testing::run_cpu1;
using testing::to_doubles;
using testing::unravel;

Tensor run_pool(const ops::Pool& op, const Tensor& x) {
  Graph g;
  g.add_output(g.apply(op, {g.input("x", x.shape_info())}));
  return run_cpu1(g, {{"x", x}});
}

std::string build_error(const ops::Pool& op, const Shape& x) {
  return error_message([&] {
    Graph g;
    g.apply(op, {g.input("x", x)});
  });
}

// Output length per ONNX / PyTorch: floor or ceil of (in + pads - extent) / stride, plus one;
// in ceil mode a last window starting past the input and the left padding is dropped.
int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe, int64_t d, bool ceil_mode) {
  const double span = static_cast<double>(in + pb + pe - d * (k - 1) - 1) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + pb) --out;
  return out;
}

std::vector<double> ref_pool(const ops::Pool& op, const std::vector<double>& x, const std::vector<int64_t>& xd,
                             std::vector<int64_t>& yd) {
  const size_t nd = xd.size() - 2;
  std::vector<int64_t> s(nd), pb(nd), pe(nd), d(nd);
  yd = {xd[0], xd[1]};
  for (size_t i = 0; i < nd; ++i) {
    s[i] = op.stride.empty() ? 1 : op.stride[i];
    d[i] = op.dilation.empty() ? 1 : op.dilation[i];
    pb[i] = op.pads.empty() ? 0 : op.pads[i];
    pe[i] = op.pads.empty() ? 0 : op.pads[nd + i];
    yd.push_back(pool_out(xd[2 + i], op.kernel[i], s[i], pb[i], pe[i], d[i], op.ceil_mode));
  }
  std::vector<double> y;
  for (int64_t oi = 0; oi < product(yd); ++oi) {
    const auto o = unravel(oi, yd);
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    int64_t real = 0, padded = 0;
    for (int64_t ki = 0; ki < product(op.kernel); ++ki) {
      const auto k = unravel(ki, op.kernel);
      std::vector<int64_t> xi{o[0], o[1]};
      bool inside = true, in_pad = true;
      for (size_t a = 0; a < nd; ++a) {
        const int64_t p = o[2 + a] * s[a] - pb[a] + k[a] * d[a];
        inside = inside && p >= 0 && p < xd[2 + a];
        in_pad = in_pad && p >= -pb[a] && p < xd[2 + a] + pe[a];
        xi.push_back(p);
      }
      padded += in_pad;
      if (!inside) continue;
      const double v = x[ravel(xi, xd)];
      mx = (std::isnan(v) || v > mx) ? v : mx;
      sum += v;
      ++real;
    }
    if (op.kind == PoolKind::Max) y.push_back(mx);
    else y.push_back(sum / static_cast<double>(op.count_include_pad ? padded : real));
  }
  return y;
}

void check_pool(ops::Pool op, const std::vector<int64_t>& xd, DType dt, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " " + enum_name(op.kind) + " x" + dims_str(xd) + " kernel " +
               dims_str(op.kernel) + " cip " + std::to_string(op.count_include_pad) + " ceil " +
               std::to_string(op.ceil_mode));
  const Tensor x = random_tensor(dt, xd, seed, is_float(dt) ? -2.0 : 0.0, is_float(dt) ? 2.0 : 100.0);
  std::vector<int64_t> yd;
  const auto ref = ref_pool(op, to_doubles(x), xd, yd);
  const Tensor y = run_pool(op, x);
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_TRUE(all_close(y, yd, ref));
}

struct PoolCase {
  std::vector<int64_t> x, kernel, stride, pads, dilation;
};

const std::vector<PoolCase> kCases = {
    {{2, 3, 9}, {3}, {2}, {1, 1}, {}},
    {{1, 2, 10}, {4}, {3}, {0, 2}, {2}},
    {{2, 2, 7, 6}, {3, 2}, {2, 2}, {1, 0, 1, 1}, {}},
    {{1, 3, 8, 7}, {3, 3}, {2, 3}, {2, 1, 0, 1}, {2, 1}},
    {{1, 2, 5, 4, 6}, {2, 2, 3}, {2, 1, 2}, {1, 0, 1, 0, 1, 1}, {}},
    {{1, 1, 4, 5, 5}, {2, 3, 2}, {1, 2, 2}, {}, {2, 1, 1}},
    {{1, 2, 150}, {70}, {5}, {3, 4}, {}},  // a 70-tap kernel over a 150-wide row
    {{1, 3, 12, 41}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {}},  // stride 1 rows longer than a vector
    {{2, 3, 48, 40}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}},  // stride 2 rows of 20 (a ResNet stem pool)
    {{1, 2, 5, 31}, {3, 3}, {2, 2}, {}, {}},             // stride 2: the last vector would read past the row
    {{1, 2, 6, 70}, {2, 2}, {2, 2}, {0, 1, 0, 1}, {}},
    {{1, 2, 9, 67}, {3, 3}, {2, 2}, {1, 2, 1, 2}, {1, 2}},  // stride 2, dilated taps, rows of 33
    {{1, 2, 13, 29}, {5, 5}, {1, 1}, {2, 2, 2, 2}, {}},     // stride 1, 5 wide (SPP-style)
    {{1, 2, 9, 19}, {2, 2}, {1, 1}, {}, {}},               // stride 1, 2 wide
    {{1, 3, 20, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}},      // rows narrower than a vector
    {{1, 1, 6400, 20}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}},   // tall and narrow: not eight planes at a time
};

TEST(Pool, MaxAndAvgAllFloatDtypes) {
  uint64_t seed = 1;
  for (const auto& c : kCases)
    for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16})
      for (PoolKind kind : {PoolKind::Max, PoolKind::Avg})
        for (bool cip : {false, true})
          for (bool ceil_mode : {false, true}) {
            if (kind == PoolKind::Max && cip) continue;
            ops::Pool op;
            op.kind = kind;
            op.kernel = c.kernel;
            op.stride = c.stride;
            op.pads = c.pads;
            op.dilation = c.dilation;
            op.count_include_pad = cip;
            op.ceil_mode = ceil_mode;
            check_pool(op, c.x, dt, seed++);
          }
}

TEST(Pool, MaxIntegerDtypes) {
  uint64_t seed = 100;
  for (const auto& c : kCases)
    for (DType dt : {DType::I32, DType::U8, DType::I8, DType::I64}) {
      ops::Pool op;
      op.kernel = c.kernel;
      op.stride = c.stride;
      op.pads = c.pads;
      op.dilation = c.dilation;
      op.ceil_mode = true;
      check_pool(op, c.x, dt, seed++);
    }
}

// NaNs inside long rows reach every output whose window holds them (the vector loops' rule).
TEST(Pool, MaxNaNInLongRows) {
  for (int64_t stride : {1, 2}) {
    std::vector<double> v = to_doubles(random_tensor(DType::F32, {1, 1, 4, 67}, 40 + stride));
    for (int64_t i : {3, 70, 134, 200, 266}) v[static_cast<size_t>(i)] = std::nan("");
    const Tensor x = from_doubles(DType::F32, {1, 1, 4, 67}, v);
    ops::Pool op;
    op.kind = PoolKind::Max;
    op.kernel = {2, 3};
    op.stride = {1, stride};
    op.pads = {0, 1, 0, 1};
    std::vector<int64_t> yd;
    const auto ref = ref_pool(op, v, {1, 1, 4, 67}, yd);
    const auto got = run_pool(op, x).to_f64();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      if (std::isnan(ref[i])) EXPECT_TRUE(std::isnan(got[i])) << "stride " << stride << " output " << i;
      else EXPECT_EQ(got[i], ref[i]) << "stride " << stride << " output " << i;
    }
  }
}

// Max pooling keeps the first largest tap in (kz, ky, kx) order, so a window whose largest value
// is zero returns the sign of its first zero (the scalar rule; the vector paths, separable or
// not, must give the same bits).
TEST(Pool, MaxSignedZerosKeepTheFirstTap) {
  uint64_t seed = 700;
  for (const auto& c : kCases)
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      std::vector<double> v = to_doubles(random_tensor(DType::F32, c.x, seed++));
      for (double& e : v) e = e > 0.3 ? -1.0 : (e > -0.3 ? std::copysign(0.0, e) : -0.5);
      const Tensor x = from_doubles(dt, c.x, v);
      ops::Pool op;
      op.kind = PoolKind::Max;
      op.kernel = c.kernel;
      op.stride = c.stride;
      op.pads = c.pads;
      op.dilation = c.dilation;
      std::vector<int64_t> yd;
      const auto ref = ref_pool(op, v, c.x, yd);
      const auto got = run_pool(op, x).to_f64();
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_EQ(got[i], ref[i]) << dtype_name(dt) << " x" << dims_str(c.x) << " output " << i;
        ASSERT_EQ(std::signbit(got[i]), std::signbit(ref[i])) << dtype_name(dt) << " x" << dims_str(c.x) << " output " << i;
      }
    }
}

TEST(Pool, CeilModeSizes) {
  ops::Pool op;
  op.kernel = {2};
  op.stride = {2};
  op.ceil_mode = true;
  EXPECT_EQ(infer_op(op, std::vector<Shape>{Shape::of({1, 1, 5})})[0], Shape::of({1, 1, 3}));  // floor mode: 2
  op.pads = {1, 1};
  // ceil(3 / 2) + 1 = 3 windows, but the third would start at 4 = in + pad_begin: dropped.
  EXPECT_EQ(infer_op(op, std::vector<Shape>{Shape::of({1, 1, 3})})[0], Shape::of({1, 1, 2}));
  op.ceil_mode = false;
  EXPECT_EQ(infer_op(op, std::vector<Shape>{Shape::of({1, 1, 5})})[0], Shape::of({1, 1, 3}));
}

TEST(Pool, KnownValuesAndPadCounting) {
  ops::Pool op;
  op.kind = PoolKind::Avg;
  op.kernel = {3};
  op.pads = {1, 1};
  const float xv[] = {3, 6, 9};
  const Tensor x = Tensor::f32({1, 1, 3}, xv);
  EXPECT_TRUE(all_close(run_pool(op, x), {1, 1, 3}, {4.5, 6, 7.5}));
  op.count_include_pad = true;
  EXPECT_TRUE(all_close(run_pool(op, x), {1, 1, 3}, {3, 6, 5}));
  // Ceil mode: the window past the right padding is not counted even with count_include_pad.
  op.kernel = {2};
  op.stride = {2};
  op.pads = {0, 0};
  op.ceil_mode = true;
  EXPECT_TRUE(all_close(run_pool(op, x), {1, 1, 2}, {4.5, 9}));
  op.kind = PoolKind::Max;
  EXPECT_TRUE(all_close(run_pool(op, x), {1, 1, 2}, {6, 9}));
}

TEST(Pool, GlobalAndNaN) {
  ops::Pool op;
  op.kernel = {2, 3};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float xv[] = {1, nan, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};
  const Tensor x = Tensor::f32({1, 2, 2, 3}, xv);
  const Tensor y = run_pool(op, x);
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{1, 2, 1, 1}));
  EXPECT_TRUE(std::isnan(y.to_f64()[0]));
  EXPECT_EQ(y.to_f64()[1], -1.0);
  op.kind = PoolKind::Avg;
  EXPECT_EQ(run_pool(op, x).to_f64()[1], -3.5);
}

TEST(Pool, ZeroSizeBatch) {
  ops::Pool op;
  op.kernel = {2, 2};
  EXPECT_EQ(run_pool(op, Tensor::empty(DType::F32, {0, 3, 4, 4})).shape(), (std::vector<int64_t>{0, 3, 3, 3}));
}

TEST(Pool, SymbolicBatch) {
  ops::Pool op;
  op.kernel = {3, 3};
  op.pads = {1, 1, 1, 1};
  const auto out = infer_op(op, std::vector<Shape>{Shape({Dim::symbol("n"), 4, Dim::symbol("h"), 9})});
  EXPECT_EQ(out[0], Shape({Dim::symbol("n"), 4, Dim::symbol("h"), 9}));
  op.stride = {2, 2};
  EXPECT_THAT(error_message([&] { infer_op(op, std::vector<Shape>{Shape({1, 4, Dim::symbol("h"), 9})}); }),
              HasSubstr("symbolic"));
}

TEST(Pool, BadInputs) {
  ops::Pool op;
  op.kernel = {2};
  EXPECT_THAT(build_error(op, Shape::of({1, 1, 4, 4})), HasSubstr("kernel must have 2 sizes"));
  op.kernel = {2, 0};
  EXPECT_THAT(build_error(op, Shape::of({1, 1, 4, 4})), HasSubstr("kernel sizes must be >= 1"));
  op.kernel = {2, 2};
  op.pads = {2, 0, 0, 0};
  EXPECT_THAT(build_error(op, Shape::of({1, 1, 4, 4})), HasSubstr("smaller than the kernel extent 2"));
  op.pads = {};
  op.kernel = {5, 2};
  EXPECT_THAT(build_error(op, Shape::of({1, 1, 4, 4})), HasSubstr("larger than the padded input 4"));
  op.kernel = {2, 2};
  EXPECT_THAT(build_error(op, Shape::of({1, 4, 4})), HasSubstr("kernel must have 1 sizes"));
  EXPECT_THAT(build_error(op, Shape::of({4, 4})), HasSubstr("rank 3..5"));
  EXPECT_THAT(build_error(op, Shape::of({1, 1, 4, 4}, DType::Bool)), HasSubstr("float or integer"));
  op.kind = PoolKind::Avg;
  EXPECT_THAT(build_error(op, Shape::of({1, 1, 4, 4}, DType::I32)), HasSubstr("float tensor"));
  op.stride = {0, 1};
  EXPECT_THAT(build_error(op, Shape::of({1, 1, 4, 4})), HasSubstr("stride values must be >= 1"));
}

}  // namespace
}  // namespace rlx
