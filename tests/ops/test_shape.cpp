// Shape ops (Reshape, Transpose, Narrow, Concat, Expand, Reverse, StopGradient) against
// naive index-mapping references, over every element size, zero-size dims, symbolic dims
// and bad inputs.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "ops/elementwise_test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using elemtest::infer1;
using elemtest::run_op;
using testing::all_close;
using testing::error_message;
using testing::random_tensor;
using testing::ravel;
using testing::to_doubles;
using testing::unravel;

// One dtype per element size, plus bool.
const DType kSizes[] = {DType::I8, DType::F16, DType::F32, DType::I64, DType::Bool, DType::BF16};

Tensor rnd(DType t, const std::vector<int64_t>& d, uint64_t seed) { return random_tensor(t, d, seed, -100, 100); }

void expect_exact(const Tensor& out, DType t, const std::vector<int64_t>& dims, const std::vector<double>& want) {
  EXPECT_EQ(out.dtype(), t);
  EXPECT_TRUE(all_close(out, dims, want, {0, 0}));
}

// ---- Reshape / StopGradient ------------------------------------------------
TEST(ShapeOps, Reshape) {
  for (DType t : kSizes) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor x = rnd(t, {2, 3, 4}, 1);
    const auto v = to_doubles(x);
    expect_exact(run_op(ops::Reshape{{4, -1}}, {x}), t, {4, 6}, v);
    expect_exact(run_op(ops::Reshape{{24}}, {x}), t, {24}, v);
    expect_exact(run_op(ops::Reshape{{-1}}, {x}), t, {24}, v);
    expect_exact(run_op(ops::Reshape{{1, 2, 1, 12, 1}}, {x}), t, {1, 2, 1, 12, 1}, v);
    expect_exact(run_op(ops::StopGradient{}, {x}), t, {2, 3, 4}, v);
  }
  const Tensor z = rnd(DType::F32, {0, 3}, 2);
  expect_exact(run_op(ops::Reshape{{3, 0, 5}}, {z}), DType::F32, {3, 0, 5}, {});
  expect_exact(run_op(ops::Reshape{{}}, {rnd(DType::F32, {1, 1}, 3)}), DType::F32, {},
               to_doubles(rnd(DType::F32, {1, 1}, 3)));
  const Tensor big = rnd(DType::F32, {300, 700}, 4);
  expect_exact(run_op(ops::Reshape{{700, 300}}, {big}), DType::F32, {700, 300}, to_doubles(big));
}

TEST(ShapeOps, ReshapeSymbolic) {
  const Dim b = Dim::symbol("batch"), s = Dim::symbol("seq");
  EXPECT_EQ(infer1(ops::Reshape{{-1, 12, 64}}, {Shape({b, 768})}), Shape({b, 12, 64}));
  EXPECT_EQ(infer1(ops::Reshape{{b, s, 2, 2}}, {Shape({b, s, 4})}), Shape({b, s, 2, 2}));
  EXPECT_EQ(infer1(ops::Reshape{{s, -1, 2, 2}}, {Shape({b, s, 4}, DType::I8)}), Shape({s, b, 2, 2}, DType::I8));
  EXPECT_EQ(infer1(ops::Reshape{{b, 0, s}}, {Shape({s, 0, b})}), Shape({b, 0, s}));
  EXPECT_THAT(error_message([&] { infer1(ops::Reshape{{-1}}, {Shape({b, s})}); }), HasSubstr("cannot infer -1"));
  EXPECT_THAT(error_message([&] { infer1(ops::Reshape{{b, 8}}, {Shape({s, 8})}); }),
              HasSubstr("cannot prove the element counts equal"));
}

TEST(ShapeOps, ReshapeErrors) {
  auto err = [](std::vector<Dim> to, const Shape& in) { return error_message([&] { infer1(ops::Reshape{to}, {in}); }); };
  std::string m = err({5, 5}, Shape::of({2, 3, 4}));
  EXPECT_THAT(m, HasSubstr("element count mismatch"));
  EXPECT_THAT(m, HasSubstr("24"));
  EXPECT_THAT(err({-1, -1}, Shape::of({2, 3})), HasSubstr("at most one dim may be -1"));
  EXPECT_THAT(err({-1, 5}, Shape::of({2, 3})), HasSubstr("not a multiple"));
  EXPECT_THAT(err({-2, 3}, Shape::of({2, 3})), HasSubstr("dims must be >= 0"));
  EXPECT_THAT(err({0, -1}, Shape::of({0, 3})), HasSubstr("ambiguous"));
}

// ---- Transpose -------------------------------------------------------------
void check_transpose(DType t, const std::vector<int64_t>& d, const std::vector<int64_t>& perm, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + dims_str(d) + " perm " + dims_str(perm));
  const Tensor x = rnd(t, d, seed);
  const auto v = to_doubles(x);
  const int64_t r = static_cast<int64_t>(d.size());
  std::vector<int64_t> p(perm), od;
  for (auto& a : p) a = a < 0 ? a + r : a;
  for (int64_t a : p) od.push_back(d[a]);
  std::vector<double> want(static_cast<size_t>(product(od)));
  for (int64_t i = 0; i < product(od); ++i) {
    const auto oi = unravel(i, od);
    std::vector<int64_t> ii(static_cast<size_t>(r));
    for (int64_t k = 0; k < r; ++k) ii[p[k]] = oi[k];
    want[i] = v[ravel(ii, d)];
  }
  expect_exact(run_op(ops::Transpose{perm}, {x}), t, od, want);
}

TEST(ShapeOps, Transpose) {
  uint64_t seed = 10;
  for (DType t : kSizes) {
    check_transpose(t, {3, 4}, {1, 0}, seed++);
    check_transpose(t, {2, 3, 4}, {2, 0, 1}, seed++);
    check_transpose(t, {2, 3, 4, 5}, {0, 2, 1, 3}, seed++);
  }
  check_transpose(DType::F32, {2, 3, 4}, {-1, 0, -2}, seed++);
  check_transpose(DType::F32, {2, 3, 4}, {0, 1, 2}, seed++);
  check_transpose(DType::F32, {1, 5, 1, 3}, {3, 2, 1, 0}, seed++);
  check_transpose(DType::F32, {4, 0, 3}, {2, 1, 0}, seed++);
  check_transpose(DType::F32, {}, {}, seed++);
  check_transpose(DType::F64, {130, 170}, {1, 0}, seed++);            // parallel strided
  check_transpose(DType::F32, {4, 32, 12, 32}, {0, 2, 1, 3}, seed++);  // attention-style head swap
  // Tiled batched 2-d transposes (non-multiples of the tile size).
  for (DType t : kSizes) check_transpose(t, {9, 40}, {1, 0}, seed++);
  check_transpose(DType::F32, {3, 40, 50}, {0, 2, 1}, seed++);
  check_transpose(DType::F32, {2, 33, 5, 70}, {0, 2, 3, 1}, seed++);
  check_transpose(DType::I16, {2, 33, 5, 70}, {0, 3, 2, 1}, seed++);
  EXPECT_EQ(infer1(ops::Transpose{{1, 0}}, {Shape({Dim::symbol("b"), 3})}), Shape({3, Dim::symbol("b")}));
  const Shape s = Shape::of({2, 3, 4});
  EXPECT_THAT(error_message([&] { infer1(ops::Transpose{{0, 1}}, {s}); }), HasSubstr("has rank 3"));
  EXPECT_THAT(error_message([&] { infer1(ops::Transpose{{0, 1, 1}}, {s}); }), HasSubstr("not a permutation"));
  EXPECT_THAT(error_message([&] { infer1(ops::Transpose{{0, 1, 3}}, {s}); }), HasSubstr("out of range"));
}

// ---- Narrow ----------------------------------------------------------------
void check_narrow(DType t, const std::vector<int64_t>& d, int64_t axis, int64_t start, int64_t len, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + dims_str(d) + " axis " + std::to_string(axis) + " start " +
               std::to_string(start) + " len " + std::to_string(len));
  const Tensor x = rnd(t, d, seed);
  const auto v = to_doubles(x);
  const int64_t ax = axis < 0 ? axis + static_cast<int64_t>(d.size()) : axis;
  const int64_t st = start < 0 ? start + d[ax] : start;
  auto od = d;
  od[ax] = len;
  std::vector<double> want(static_cast<size_t>(product(od)));
  for (int64_t i = 0; i < product(od); ++i) {
    auto ii = unravel(i, od);
    ii[ax] += st;
    want[i] = v[ravel(ii, d)];
  }
  expect_exact(run_op(ops::Narrow{axis, start, len}, {x}), t, od, want);
}

TEST(ShapeOps, Narrow) {
  uint64_t seed = 40;
  for (DType t : kSizes) {
    check_narrow(t, {4, 5, 6}, 1, 1, 3, seed++);
    check_narrow(t, {4, 5, 6}, -1, 2, 4, seed++);
    check_narrow(t, {4, 5, 6}, 0, 3, 1, seed++);
  }
  check_narrow(DType::F32, {4, 5}, 1, -2, 2, seed++);
  check_narrow(DType::F32, {4, 5}, 1, 5, 0, seed++);
  check_narrow(DType::F32, {4, 5}, 0, 0, 4, seed++);
  check_narrow(DType::F32, {0, 5}, 1, 1, 2, seed++);
  check_narrow(DType::F32, {200, 300}, 1, 100, 150, seed++);
  EXPECT_EQ(infer1(ops::Narrow{0, 2, 3}, {Shape({Dim::symbol("s"), 4})}), Shape({3, 4}));
  const Shape s = Shape::of({4, 5});
  EXPECT_THAT(error_message([&] { infer1(ops::Narrow{1, 3, 3}, {s}); }), HasSubstr("out of bounds"));
  EXPECT_THAT(error_message([&] { infer1(ops::Narrow{1, -6, 1}, {s}); }), HasSubstr("out of bounds"));
  EXPECT_THAT(error_message([&] { infer1(ops::Narrow{1, 0, -1}, {s}); }), HasSubstr("negative"));
  EXPECT_THAT(error_message([&] { infer1(ops::Narrow{2, 0, 1}, {s}); }), HasSubstr("out of range"));
  EXPECT_THAT(error_message([&] { infer1(ops::Narrow{0, 0, 1}, {Shape::of({})}); }), HasSubstr("scalar"));
}

// ---- Concat ----------------------------------------------------------------
void check_concat(DType t, const std::vector<std::vector<int64_t>>& ds, int64_t axis, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " axis " + std::to_string(axis) + " first " + dims_str(ds[0]));
  std::vector<Tensor> xs;
  std::vector<std::vector<double>> vs;
  for (const auto& d : ds) {
    xs.push_back(rnd(t, d, seed++));
    vs.push_back(to_doubles(xs.back()));
  }
  const int64_t ax = axis < 0 ? axis + static_cast<int64_t>(ds[0].size()) : axis;
  auto od = ds[0];
  od[ax] = 0;
  for (const auto& d : ds) od[ax] += d[ax];
  std::vector<double> want(static_cast<size_t>(product(od)));
  for (int64_t i = 0; i < product(od); ++i) {
    auto ii = unravel(i, od);
    size_t k = 0;
    while (ii[ax] >= ds[k][ax]) ii[ax] -= ds[k++][ax];
    want[i] = vs[k][ravel(ii, ds[k])];
  }
  expect_exact(run_op(ops::Concat{axis}, xs), t, od, want);
}

TEST(ShapeOps, Concat) {
  uint64_t seed = 70;
  for (DType t : kSizes) {
    check_concat(t, {{2, 3, 4}, {2, 1, 4}, {2, 5, 4}}, 1, seed += 5);
    check_concat(t, {{2, 3}, {4, 3}}, 0, seed += 5);
    check_concat(t, {{2, 3}, {2, 2}}, -1, seed += 5);
  }
  check_concat(DType::F32, {{2, 3}}, 1, seed += 5);
  check_concat(DType::F32, {{2, 0}, {2, 3}, {2, 0}}, 1, seed += 5);
  check_concat(DType::F32, {{0, 3}, {0, 3}}, 0, seed += 5);
  check_concat(DType::F32, {{300, 200}, {300, 100}}, 1, seed += 5);
  const Dim b = Dim::symbol("b");
  EXPECT_EQ(infer1(ops::Concat{1}, {Shape({b, 2}), Shape({b, 3})}), Shape({b, 5}));
  EXPECT_EQ(infer1(ops::Concat{0}, {Shape({b, 2}), Shape({0, 2})}), Shape({b, 2}));
  EXPECT_THAT(error_message([&] { infer1(ops::Concat{0}, {Shape({b, 2}), Shape({1, 2})}); }), HasSubstr("symbolic"));
  EXPECT_THAT(error_message([&] { infer1(ops::Concat{0}, {Shape::of({2, 3}), Shape::of({2, 3}, DType::F16)}); }),
              HasSubstr("dtype"));
  EXPECT_THAT(error_message([&] { infer1(ops::Concat{0}, {Shape::of({2, 3}), Shape::of({2})}); }), HasSubstr("rank"));
  const std::string m = error_message([&] { infer1(ops::Concat{0}, {Shape::of({2, 3}), Shape::of({2, 4})}); });
  EXPECT_THAT(m, HasSubstr("dim 1"));
  EXPECT_THAT(m, HasSubstr("f32[2,4]"));
  EXPECT_THAT(error_message([&] { infer1(ops::Concat{2}, {Shape::of({2, 3})}); }), HasSubstr("out of range"));
}

// ---- Expand ----------------------------------------------------------------
void check_expand(DType t, const std::vector<int64_t>& d, const std::vector<Dim>& target,
                  const std::vector<int64_t>& od, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + dims_str(d) + " -> " + dims_str(od));
  const Tensor x = rnd(t, d, seed);
  const auto v = to_doubles(x);
  std::vector<double> want(static_cast<size_t>(product(od)));
  for (int64_t i = 0; i < product(od); ++i) want[i] = v[elemtest::bcast_index(unravel(i, od), d)];
  expect_exact(run_op(ops::Expand{target}, {x}), t, od, want);
}

TEST(ShapeOps, Expand) {
  uint64_t seed = 100;
  for (DType t : kSizes) {
    check_expand(t, {3, 1}, {2, 3, 4}, {2, 3, 4}, seed++);
    check_expand(t, {}, {2, 2}, {2, 2}, seed++);
  }
  check_expand(DType::F32, {3, 4}, {3, 4}, {3, 4}, seed++);
  check_expand(DType::F32, {1, 4}, {5, -1, -1}, {5, 1, 4}, seed++);
  check_expand(DType::F32, {1}, {0}, {0}, seed++);
  check_expand(DType::F32, {2, 1, 3}, {2, 2, 6, 3}, {2, 2, 6, 3}, seed++);
  check_expand(DType::F32, {1, 500}, {100, 500}, {100, 500}, seed++);
  const Dim b = Dim::symbol("b");
  EXPECT_EQ(infer1(ops::Expand{{b, 3}}, {Shape::of({1, 3})}), Shape({b, 3}));
  const std::string m = error_message([&] { infer1(ops::Expand{{2, 4}}, {Shape::of({3})}); });
  EXPECT_THAT(m, HasSubstr("cannot broadcast"));
  EXPECT_THAT(error_message([&] { infer1(ops::Expand{{3}}, {Shape::of({1, 3})}); }), HasSubstr("lower than"));
  EXPECT_THAT(error_message([&] { infer1(ops::Expand{{-1, 3}}, {Shape::of({3})}); }), HasSubstr("new leading dim"));
  EXPECT_THAT(error_message([&] { infer1(ops::Expand{{-3}}, {Shape::of({3})}); }), HasSubstr("dims must be >= 0"));
}

// ---- Reverse ---------------------------------------------------------------
void check_reverse(DType t, const std::vector<int64_t>& d, const std::vector<int64_t>& axes, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + dims_str(d) + " axes " + dims_str(axes));
  const Tensor x = rnd(t, d, seed);
  const auto v = to_doubles(x);
  const int64_t r = static_cast<int64_t>(d.size());
  std::vector<double> want(v.size());
  for (int64_t i = 0; i < product(d); ++i) {
    auto ii = unravel(i, d);
    for (int64_t a : axes) {
      const int64_t n = a < 0 ? a + r : a;
      ii[n] = d[n] - 1 - ii[n];
    }
    want[i] = v[ravel(ii, d)];
  }
  expect_exact(run_op(ops::Reverse{axes}, {x}), t, d, want);
}

TEST(ShapeOps, Reverse) {
  uint64_t seed = 130;
  for (DType t : kSizes) {
    check_reverse(t, {3, 4, 5}, {1}, seed++);
    check_reverse(t, {3, 4, 5}, {0, -1}, seed++);
  }
  check_reverse(DType::F32, {3, 4, 5}, {0, 1, 2}, seed++);
  check_reverse(DType::F32, {3, 4}, {}, seed++);
  check_reverse(DType::F32, {3, 0}, {0}, seed++);
  check_reverse(DType::F32, {1, 7}, {0}, seed++);
  check_reverse(DType::F32, {}, {}, seed++);
  check_reverse(DType::F32, {100, 400}, {1}, seed++);
  EXPECT_THAT(error_message([&] { infer1(ops::Reverse{{0, -2}}, {Shape::of({2, 3})}); }), HasSubstr("twice"));
  EXPECT_THAT(error_message([&] { infer1(ops::Reverse{{2}}, {Shape::of({2, 3})}); }), HasSubstr("out of range"));
}

}  // namespace
}  // namespace rlx
