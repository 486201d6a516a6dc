// Reduce (sum, mean, max, min, prod) against a naive double reference.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::error_message;
using testing::from_doubles;
using testing::random_tensor;
using testing::run_cpu1;
using testing::to_doubles;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const ReduceKind kKinds[] = {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod};
const DType kNumeric[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8,
                          DType::I16, DType::I32, DType::I64,  DType::U8,  DType::U32};

// Integer results wrap around in the dtype's width.
double wrap_to(DType dt, double v) {
  const int64_t i = static_cast<int64_t>(v);
  switch (dt) {
    case DType::I8: return static_cast<int8_t>(i);
    case DType::I16: return static_cast<int16_t>(i);
    case DType::I32: return static_cast<int32_t>(i);
    case DType::U8: return static_cast<uint8_t>(i);
    case DType::U32: return static_cast<uint32_t>(i);
    default: return v;
  }
}

struct ReduceRef {
  std::vector<int64_t> dims;
  std::vector<double> values;
};

ReduceRef ref_reduce(ReduceKind kind, DType dt, const std::vector<double>& x, const std::vector<int64_t>& dims,
                     std::vector<int64_t> axes, bool keep) {
  const size_t r = dims.size();
  std::vector<bool> red(r, axes.empty());
  for (int64_t a : axes) red[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(r) : a)] = true;
  ReduceRef out;
  std::vector<int64_t> kept;  // output dims without the keep_dims ones
  for (size_t d = 0; d < r; ++d) {
    if (!red[d]) kept.push_back(dims[d]);
    if (!red[d] || keep) out.dims.push_back(red[d] ? 1 : dims[d]);
  }
  int64_t nout = 1, count = 1;
  for (int64_t d : kept) nout *= d;
  for (size_t d = 0; d < r; ++d)
    if (red[d]) count *= dims[d];
  const bool is_f = is_float(dt);
  std::vector<double> acc(static_cast<size_t>(nout), kind == ReduceKind::Prod ? 1.0
                                                     : kind == ReduceKind::Max ? -INFINITY
                                                     : kind == ReduceKind::Min ? INFINITY
                                                                               : 0.0);
  std::vector<int64_t> idx(r, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < r; ++d)
      if (!red[d]) o = o * dims[d] + idx[d];
    double& a = acc[static_cast<size_t>(o)];
    const double v = x[i];
    switch (kind) {
      case ReduceKind::Sum:
      case ReduceKind::Mean: a += v; break;
      case ReduceKind::Prod: a *= v; break;
      case ReduceKind::Max: a = (std::isnan(a) || std::isnan(v)) ? kNaN : std::max(a, v); break;
      case ReduceKind::Min: a = (std::isnan(a) || std::isnan(v)) ? kNaN : std::min(a, v); break;
    }
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  for (double& a : acc) {
    if (kind == ReduceKind::Mean) a = is_f ? (count ? a / static_cast<double>(count) : kNaN) : std::trunc(a / static_cast<double>(count));
    if (!is_f) a = wrap_to(dt, a);
  }
  out.values = acc;
  return out;
}

Tensor run_reduce(ReduceKind kind, const Tensor& x, std::vector<int64_t> axes, bool keep) {
  Graph g;
  g.add_output(g.reduce(kind, g.input("x", x.shape_info()), std::move(axes), keep));
  return run_cpu1(g, {{"x", x}});
}

std::string axes_str(const std::vector<int64_t>& axes) {
  std::string s;
  for (int64_t a : axes) s += std::to_string(a) + " ";
  return s;
}

void check_reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& axes, bool keep) {
  SCOPED_TRACE(std::string(enum_name(kind)) + " " + dtype_name(x.dtype()) + " " + dims_str(x.shape()) + " axes " +
               axes_str(axes) + "keep " + std::to_string(keep));
  const ReduceRef ref = ref_reduce(kind, x.dtype(), to_doubles(x), x.shape(), axes, keep);
  const Tensor out = run_reduce(kind, x, axes, keep);
  EXPECT_EQ(out.dtype(), x.dtype());
  EXPECT_TRUE(testing::all_close(out, ref.dims, ref.values));
}

TEST(Reduce, AllKindsAxesAndKeepDims) {
  const Tensor x = random_tensor(DType::F32, {3, 4, 5, 2}, 1, -2, 2);
  const std::vector<std::vector<int64_t>> axes_sets = {{},     {0},     {1},      {-1},  {2},          {0, 2},
                                                       {1, 3}, {-4, -2}, {3, 0}, {1, 2}, {0, 1, 2, 3}, {-3}};
  for (ReduceKind k : kKinds)
    for (const auto& axes : axes_sets)
      for (bool keep : {false, true}) check_reduce(k, x, axes, keep);
}

TEST(Reduce, EveryNumericDtype) {
  for (DType dt : kNumeric) {
    const bool u = dt == DType::U8 || dt == DType::U32;
    // |values| <= 2 keeps every product exact in double (at most 2^24 here).
    Tensor x = is_float(dt) ? random_tensor(dt, {3, 4, 2}, 2) : random_tensor(dt, {3, 4, 2}, 2, u ? 0 : -2, u ? 2 : 2);
    for (ReduceKind k : kKinds)
      for (const auto& axes : std::vector<std::vector<int64_t>>{{1}, {0, 2}, {}, {-1}})
        for (bool keep : {false, true}) check_reduce(k, x, axes, keep);
  }
}

TEST(Reduce, IntegerMeanTruncatesTowardZero) {
  const Tensor x = from_doubles(DType::I32, {3, 2}, {-7, 2, 7, 2, -1, 0});
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Mean, x, {1}, false), {3}, {-2, 4, 0}, {0, 0}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Mean, from_doubles(DType::U8, {2}, {255, 254}), {}, false), {},
                                 {254}, {0, 0}));  // sum 509 does not wrap before the division
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Mean, from_doubles(DType::I8, {3}, {-128, -128, -127}), {0}, true),
                                 {1}, {-127}, {0, 0}));
}

TEST(Reduce, IntegerSumAndProdWrap) {
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Sum, from_doubles(DType::I8, {2}, {100, 100}), {}, false), {},
                                 {-56}, {0, 0}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Prod, from_doubles(DType::U8, {2}, {16, 16}), {0}, false), {},
                                 {0}, {0, 0}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Prod, from_doubles(DType::I16, {3}, {-200, 200, 3}), {0}, false),
                                 {}, {wrap_to(DType::I16, -120000)}, {0, 0}));
  const Tensor big = from_doubles(DType::I64, {2}, {5e18, 5e18});  // sum exceeds 2^63
  EXPECT_EQ(run_reduce(ReduceKind::Sum, big, {}, false).to_i64()[0],
            static_cast<int64_t>(static_cast<uint64_t>(5000000000000000000) * 2));
}

TEST(Reduce, ZeroSizeAxes) {
  const Tensor e = Tensor::zeros(DType::F32, {3, 0});
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Sum, e, {1}, false), {3}, {0, 0, 0}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Prod, e, {-1}, true), {3, 1}, {1, 1, 1}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Mean, e, {1}, false), {3}, {kNaN, kNaN, kNaN}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Mean, Tensor::zeros(DType::F16, {0}), {}, false), {}, {kNaN}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Sum, Tensor::zeros(DType::I32, {2, 0, 2}), {1}, false), {2, 2},
                                 {0, 0, 0, 0}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Prod, Tensor::zeros(DType::U8, {0, 2}), {}, true), {1, 1}, {1}));
  // Reducing a non-empty axis of an empty tensor gives an empty result, even for max.
  for (ReduceKind k : kKinds) {
    const Tensor o = run_reduce(k, e, {0}, false);
    EXPECT_EQ(o.shape(), (std::vector<int64_t>{0}));
  }
  Graph g;
  Value x = g.input("x", Shape::of({3, 0}));
  EXPECT_THAT(error_message([&] { g.reduce(ReduceKind::Max, x, {1}); }), HasSubstr("reduces zero elements"));
  EXPECT_THAT(error_message([&] { g.reduce(ReduceKind::Min, x, {}); }), HasSubstr("f32[3,0]"));
  EXPECT_THAT(error_message([&] { g.reduce(ReduceKind::Mean, g.input("i", Shape::of({0}, DType::I32)), {0}); }),
              HasSubstr("division by zero"));
  // Symbolic dim that turns out empty at run time.
  Graph h;
  h.add_output(h.reduce(ReduceKind::Max, h.input("y", Shape({2, Dim::symbol("n")})), {1}));
  EXPECT_THAT(error_message([&] { run_cpu1(h, {{"y", Tensor::zeros(DType::F32, {2, 0})}}); }),
              HasSubstr("zero elements"));
}

TEST(Reduce, BoolMaxIsAnyMinIsAll) {
  const Tensor b = from_doubles(DType::Bool, {3, 2}, {0, 0, 0, 1, 1, 1});
  const Tensor any = run_reduce(ReduceKind::Max, b, {1}, false);
  EXPECT_EQ(any.dtype(), DType::Bool);
  EXPECT_TRUE(testing::all_close(any, {3}, {0, 1, 1}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Min, b, {-1}, true), {3, 1}, {0, 0, 1}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Min, b, {0}, false), {2}, {0, 0}));
  Graph g;
  Value x = g.input("x", Shape::of({3}, DType::Bool));
  for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Prod})
    EXPECT_THAT(error_message([&] { g.reduce(k, x, {}); }), HasSubstr("bool"));
}

TEST(Reduce, MaxMinPropagateNaN) {
  // Both loop shapes: reduced innermost group (axis 1) and kept innermost group (axis 0).
  const Tensor x = from_doubles(DType::F32, {3, 3}, {1, kNaN, 3, -2, 5, 0, kNaN, kNaN, 1});
  for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min, ReduceKind::Sum})
    for (int64_t axis : {0, 1}) check_reduce(k, x, {axis}, false);
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Max, x, {1}, false), {3}, {kNaN, 5, kNaN}));
  EXPECT_TRUE(testing::all_close(run_reduce(ReduceKind::Min, x, {0}, false), {3}, {kNaN, kNaN, 0}));
}

TEST(Reduce, ScalarAndSizeOneDims) {
  const Tensor s = from_doubles(DType::F32, {}, {2.5});
  for (ReduceKind k : kKinds) {
    EXPECT_TRUE(testing::all_close(run_reduce(k, s, {}, false), {}, {2.5}));
    EXPECT_TRUE(testing::all_close(run_reduce(k, s, {}, true), {}, {2.5}));
  }
  const Tensor x = random_tensor(DType::F64, {1, 3, 1, 4, 1}, 5);
  for (ReduceKind k : kKinds)
    for (const auto& axes : std::vector<std::vector<int64_t>>{{0}, {2, 4}, {0, 2, 4}, {1, 2}, {-2, 0}, {}})
      for (bool keep : {false, true}) check_reduce(k, x, axes, keep);
}

TEST(Reduce, LargeInputsUseBothLoops) {
  const Tensor x = random_tensor(DType::F32, {300, 257}, 6);
  for (const auto& axes : std::vector<std::vector<int64_t>>{{0}, {1}, {}}) check_reduce(ReduceKind::Sum, x, axes, false);
  check_reduce(ReduceKind::Max, x, {0}, true);
  const Tensor y = random_tensor(DType::BF16, {2, 3000, 3}, 7);
  check_reduce(ReduceKind::Mean, y, {1}, false);
  check_reduce(ReduceKind::Min, y, {0, 2}, false);
  const Tensor z = random_tensor(DType::F32, {4, 6, 700}, 8);
  check_reduce(ReduceKind::Sum, z, {0, 1}, false);  // kept row of 700 in two blocks
  check_reduce(ReduceKind::Prod, z, {1}, true);
  // A global average pool: one contiguous run of 63 per output (the f32 vector-lane sum, its tail).
  check_reduce(ReduceKind::Mean, random_tensor(DType::F32, {2, 5, 7, 9}, 9, -3, 5), {2, 3}, true);
  check_reduce(ReduceKind::Sum, random_tensor(DType::F32, {3, 1031}, 10), {1}, false);
  // Runs of 128 K values and more: pieces on the pool's threads, combined in order.
  const Tensor big = random_tensor(DType::F32, {2, 300001}, 11, -4, 4);
  for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min}) {
    check_reduce(k, big, {1}, false);
    check_reduce(k, big, {}, false);
  }
  // A NaN anywhere in a long run (the vector lanes, a piece, the tail) makes the max / min NaN.
  for (int64_t at : {int64_t{5}, int64_t{70000}, int64_t{300000}}) {
    std::vector<double> v = to_doubles(random_tensor(DType::F32, {300001}, 12));
    v[static_cast<size_t>(at)] = std::nan("");
    const Tensor t = testing::from_doubles(DType::F32, {300001}, v);
    for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min}) {
      const Tensor r = run_reduce(k, t, {0}, false);
      EXPECT_TRUE(std::isnan(r.to_f64()[0])) << enum_name(k) << " NaN at " << at;
    }
  }
}

TEST(Reduce, ShapeInferenceAndBadAxes) {
  const Shape in({Dim::symbol("b"), 5, Dim::symbol("n")}, DType::F16);
  auto infer = [&](ReduceKind k, std::vector<int64_t> axes, bool keep) {
    ops::Reduce op;
    op.kind = k;
    op.axes = std::move(axes);
    op.keep_dims = keep;
    return op.infer(std::vector<Shape>{in}).at(0);
  };
  EXPECT_EQ(infer(ReduceKind::Sum, {1}, true), Shape({Dim::symbol("b"), 1, Dim::symbol("n")}, DType::F16));
  EXPECT_EQ(infer(ReduceKind::Max, {-1, 0}, false), Shape({5}, DType::F16));
  EXPECT_EQ(infer(ReduceKind::Mean, {}, false), Shape({}, DType::F16));
  Graph g;
  Value x = g.input("x", Shape::of({2, 3, 4, 5}));
  const std::string dup = error_message([&] { g.reduce(ReduceKind::Sum, x, {1, -3}); });
  EXPECT_THAT(dup, HasSubstr("more than once"));
  EXPECT_THAT(dup, HasSubstr("[1,-3]"));
  EXPECT_THAT(error_message([&] { g.reduce(ReduceKind::Sum, x, {0, 0}); }), HasSubstr("more than once"));
  const std::string oor = error_message([&] { g.reduce(ReduceKind::Mean, x, {4}); });
  EXPECT_THAT(oor, HasSubstr("axis 4"));
  EXPECT_THAT(oor, HasSubstr("f32[2,3,4,5]"));
  EXPECT_THAT(error_message([&] { g.reduce(ReduceKind::Mean, x, {-5}); }), HasSubstr("out of range"));
}

}  // namespace
}  // namespace rlx
