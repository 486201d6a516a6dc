// ArgMax, ArgMin, TopK and Cumsum against naive double references.
#include <algorithm>
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
using testing::run_cpu;
using testing::run_cpu1;
using testing::to_doubles;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const DType kAll[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8,  DType::I16,
                      DType::I32, DType::I64, DType::U8,   DType::U32, DType::Bool};

struct Split {
  int64_t outer = 1, mid = 1, inner = 1;
};
Split split(const std::vector<int64_t>& dims, int64_t axis) {
  Split s;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d < axis) s.outer *= dims[static_cast<size_t>(d)];
    else if (d == axis) s.mid = dims[static_cast<size_t>(d)];
    else s.inner *= dims[static_cast<size_t>(d)];
  }
  return s;
}
int64_t norm(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// Small-range values so ties are frequent (floats too).
Tensor tie_tensor(DType dt, const std::vector<int64_t>& dims, uint64_t seed) {
  const bool unsigned_or_bool = dt == DType::U8 || dt == DType::U32 || dt == DType::Bool;
  std::vector<double> v = to_doubles(random_tensor(DType::F64, dims, seed, 0, 1));
  for (double& x : v) x = unsigned_or_bool ? std::floor(x * (dt == DType::Bool ? 2 : 4)) : std::floor(x * 5) - 2;
  return from_doubles(dt, dims, v);
}

// ---- ArgMax / ArgMin ---------------------------------------------------------------
std::vector<double> ref_arg(const std::vector<double>& x, const std::vector<int64_t>& dims, int64_t axis, bool is_max,
                            bool last) {
  const Split s = split(dims, axis);
  std::vector<double> out;
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t m) { return x[static_cast<size_t>((o * s.mid + m) * s.inner + i)]; };
      int64_t pick = -1;
      for (int64_t m = 0; m < s.mid; ++m)  // NaN wins (numpy)
        if (std::isnan(at(m)) && (pick < 0 || last)) pick = m;
      if (pick < 0) {
        double best = at(0);
        for (int64_t m = 0; m < s.mid; ++m) best = is_max ? std::max(best, at(m)) : std::min(best, at(m));
        for (int64_t m = 0; m < s.mid; ++m)
          if (at(m) == best && (pick < 0 || last)) pick = m;
      }
      out.push_back(static_cast<double>(pick));
    }
  }
  return out;
}

Tensor run_arg(const Tensor& x, bool is_max, int64_t axis, bool keep, bool last) {
  Graph g;
  Value v = g.input("x", x.shape_info());
  g.add_output(is_max ? g.apply(ops::ArgMax{axis, keep, last}, {v}) : g.apply(ops::ArgMin{axis, keep, last}, {v}));
  return run_cpu1(g, {{"x", x}});
}

void check_arg(const Tensor& x, int64_t axis) {
  const std::vector<int64_t>& dims = x.shape();
  const int64_t a = norm(axis, dims.size());
  for (bool is_max : {true, false})
    for (bool keep : {false, true})
      for (bool last : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(x.dtype())) + (is_max ? " argmax" : " argmin") + " axis " +
                     std::to_string(axis) + " keep " + std::to_string(keep) + " last " + std::to_string(last));
        std::vector<int64_t> od = dims;
        if (keep) od[static_cast<size_t>(a)] = 1;
        else od.erase(od.begin() + a);
        const Tensor out = run_arg(x, is_max, axis, keep, last);
        EXPECT_EQ(out.dtype(), DType::I64);
        EXPECT_TRUE(testing::all_close(out, od, ref_arg(to_doubles(x), dims, a, is_max, last), {0, 0}));
      }
}

TEST(Indexing, ArgMaxArgMinEveryDtypeAxisAndFlag) {
  for (DType dt : kAll) check_arg(tie_tensor(dt, {3, 4, 5}, 40), 1);
  const Tensor f = tie_tensor(DType::F32, {3, 4, 5}, 41);
  for (int64_t axis : {0, 2, -1, -3}) check_arg(f, axis);
  check_arg(tie_tensor(DType::F32, {2, 600}, 42), 0);  // inner blocks
  check_arg(tie_tensor(DType::I32, {7}, 43), 0);
  check_arg(random_tensor(DType::F64, {4, 1, 3}, 44), 1);  // size-1 axis
}

TEST(Indexing, ArgMaxArgMinNaN) {
  const Tensor x = from_doubles(DType::F32, {6}, {1, kNaN, 3, kNaN, -5, 3});
  EXPECT_EQ(run_arg(x, true, 0, false, false).to_i64()[0], 1);
  EXPECT_EQ(run_arg(x, true, 0, false, true).to_i64()[0], 3);
  EXPECT_EQ(run_arg(x, false, 0, false, false).to_i64()[0], 1);
  EXPECT_EQ(run_arg(x, false, 0, false, true).to_i64()[0], 3);
  const Tensor y = from_doubles(DType::F16, {2, 3}, {2, 7, 7, kNaN, 0, kNaN});
  check_arg(y, 0);
  check_arg(y, 1);
}

TEST(Indexing, ArgMaxZeroSizeAndBadInputs) {
  // Empty non-axis dim: empty output.
  const Tensor e = run_arg(Tensor::zeros(DType::F32, {0, 3}), true, 1, false, false);
  EXPECT_EQ(e.shape(), (std::vector<int64_t>{0}));
  Graph g;
  Value x = g.input("x", Shape::of({0, 3}));
  EXPECT_THAT(error_message([&] { g.argmax(x, 0); }), HasSubstr("size 0"));
  EXPECT_THAT(error_message([&] { g.argmin(x, 2); }), HasSubstr("axis 2 is out of range"));
  EXPECT_THAT(error_message([&] { g.argmax(g.input("s", Shape::of({})), 0); }), HasSubstr("scalar"));
  // A symbolic axis that is empty at run time fails in the kernel or at specialization.
  Graph h;
  Value y = h.input("y", Shape({2, Dim::symbol("n")}));
  h.add_output(h.argmin(y, 1, true));
  EXPECT_EQ(h.shape(h.outputs()[0]), Shape({2, 1}, DType::I64));
  EXPECT_THAT(error_message([&] { run_cpu1(h, {{"y", Tensor::zeros(DType::F32, {2, 0})}}); }), HasSubstr("size 0"));
  EXPECT_TRUE(testing::all_close(run_cpu1(h, {{"y", from_doubles(DType::F32, {2, 2}, {3, 1, 0, 2})}}), {2, 1}, {1, 0},
                                 {0, 0}));
}

// ---- TopK -------------------------------------------------------------------------
struct TopKRef {
  std::vector<double> values, indices;
};
TopKRef ref_topk(const std::vector<double>& x, const std::vector<int64_t>& dims, int64_t axis, int64_t k,
                 bool largest) {
  const Split s = split(dims, axis);
  TopKRef r;
  r.values.resize(static_cast<size_t>(s.outer * k * s.inner));
  r.indices.resize(r.values.size());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      std::vector<std::pair<double, int64_t>> row;
      for (int64_t m = 0; m < s.mid; ++m) row.emplace_back(x[static_cast<size_t>((o * s.mid + m) * s.inner + i)], m);
      // NaN counts as the largest value; stable_sort keeps ties in index order.
      auto key = [](double v) { return std::isnan(v) ? std::numeric_limits<double>::infinity() : v; };
      auto rank_nan = [](double v) { return std::isnan(v) ? 1 : 0; };
      std::stable_sort(row.begin(), row.end(), [&](const auto& a, const auto& b) {
        if (rank_nan(a.first) != rank_nan(b.first))
          return largest ? rank_nan(a.first) > rank_nan(b.first) : rank_nan(a.first) < rank_nan(b.first);
        return largest ? key(a.first) > key(b.first) : key(a.first) < key(b.first);
      });
      for (int64_t j = 0; j < k; ++j) {
        const size_t p = static_cast<size_t>((o * k + j) * s.inner + i);
        r.values[p] = row[static_cast<size_t>(j)].first;
        r.indices[p] = static_cast<double>(row[static_cast<size_t>(j)].second);
      }
    }
  return r;
}

std::vector<Tensor> run_topk(const Tensor& x, int64_t k, int64_t axis, bool largest) {
  Graph g;
  Value v = g.input("x", x.shape_info());
  auto [vals, idx] = g.topk(v, k, axis, largest);
  g.add_output(vals);
  g.add_output(idx);
  return run_cpu(g, {{"x", x}});
}

void check_topk(const Tensor& x, int64_t k, int64_t axis) {
  const int64_t a = norm(axis, x.shape().size());
  for (bool largest : {true, false}) {
    SCOPED_TRACE(std::string(dtype_name(x.dtype())) + " k " + std::to_string(k) + " axis " + std::to_string(axis) +
                 " largest " + std::to_string(largest));
    const TopKRef ref = ref_topk(to_doubles(x), x.shape(), a, k, largest);
    const std::vector<Tensor> out = run_topk(x, k, axis, largest);
    ASSERT_EQ(out.size(), 2u);
    std::vector<int64_t> od = x.shape();
    od[static_cast<size_t>(a)] = k;
    EXPECT_EQ(out[0].dtype(), x.dtype());
    EXPECT_EQ(out[1].dtype(), DType::I64);
    EXPECT_TRUE(testing::all_close(out[0], od, ref.values, {0, 0}));
    EXPECT_TRUE(testing::all_close(out[1], od, ref.indices, {0, 0}));
  }
}

TEST(Indexing, TopKEveryDtypeWithTies) {
  for (DType dt : kAll) check_topk(tie_tensor(dt, {3, 7, 4}, 50), 3, 1);
  const Tensor f = random_tensor(DType::F32, {3, 7, 4}, 51);
  check_topk(f, 2, -1);
  check_topk(f, 2, -3);
  check_topk(f, 7, 1);  // full sort
  check_topk(f, 1, 2);
  check_topk(tie_tensor(DType::F32, {2, 30}, 52), 9, -1);
}

TEST(Indexing, TopKExplicitTiesAndNaN) {
  const Tensor x = from_doubles(DType::F32, {5}, {3, 1, 3, 2, 3});
  std::vector<Tensor> o = run_topk(x, 3, 0, true);
  EXPECT_TRUE(testing::all_close(o[0], {3}, {3, 3, 3}, {0, 0}));
  EXPECT_TRUE(testing::all_close(o[1], {3}, {0, 2, 4}, {0, 0}));
  o = run_topk(from_doubles(DType::I32, {4}, {2, 1, 2, 1}), 3, 0, false);
  EXPECT_TRUE(testing::all_close(o[0], {3}, {1, 1, 2}, {0, 0}));
  EXPECT_TRUE(testing::all_close(o[1], {3}, {1, 3, 0}, {0, 0}));
  // NaN ranks above +inf: first when largest, last when smallest.
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor n = from_doubles(DType::F64, {5}, {0, kNaN, inf, -inf, kNaN});
  o = run_topk(n, 4, 0, true);
  EXPECT_TRUE(testing::all_close(o[1], {4}, {1, 4, 2, 0}, {0, 0}));
  o = run_topk(n, 4, 0, false);
  EXPECT_TRUE(testing::all_close(o[1], {4}, {3, 0, 2, 1}, {0, 0}));
  check_topk(from_doubles(DType::BF16, {2, 4}, {1, kNaN, 1, -2, kNaN, kNaN, 0, 5}), 3, 1);
}

TEST(Indexing, TopKZeroSizeAndBadInputs) {
  const std::vector<Tensor> e = run_topk(Tensor::zeros(DType::F32, {0, 5}), 2, 1, true);
  EXPECT_EQ(e[0].shape(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(e[1].shape(), (std::vector<int64_t>{0, 2}));
  Graph g;
  Value x = g.input("x", Shape::of({3, 5}));
  EXPECT_THAT(error_message([&] { g.topk(x, 6, -1); }), HasSubstr("k = 6 exceeds the size 5"));
  EXPECT_THAT(error_message([&] { g.topk(x, 0, -1); }), HasSubstr("k must be >= 1"));
  EXPECT_THAT(error_message([&] { g.topk(x, -2, -1); }), HasSubstr("k must be >= 1"));
  EXPECT_THAT(error_message([&] { g.topk(x, 1, 2); }), HasSubstr("axis 2 is out of range"));
  EXPECT_THAT(error_message([&] { g.topk(g.input("z", Shape::of({4, 0})), 1, 1); }), HasSubstr("exceeds"));
  // Symbolic axis: the output dim is k; k is checked against the real size at run time.
  Graph h;
  auto [v, i] = h.topk(h.input("y", Shape({2, Dim::symbol("n")})), 3, 1);
  EXPECT_EQ(h.shape(v), Shape({2, 3}));
  EXPECT_EQ(h.shape(i), Shape({2, 3}, DType::I64));
  h.add_output(v);
  EXPECT_THAT(error_message([&] { run_cpu1(h, {{"y", Tensor::zeros(DType::F32, {2, 2})}}); }), HasSubstr("exceeds"));
}

// ---- Cumsum -----------------------------------------------------------------------
std::vector<double> ref_cumsum(const std::vector<double>& x, const std::vector<int64_t>& dims, int64_t axis, bool excl,
                               bool rev) {
  const Split s = split(dims, axis);
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      double acc = 0;
      for (int64_t t = 0; t < s.mid; ++t) {
        const int64_t m = rev ? s.mid - 1 - t : t;
        const size_t p = static_cast<size_t>((o * s.mid + m) * s.inner + i);
        if (excl) out[p] = acc;
        acc += x[p];
        if (!excl) out[p] = acc;
      }
    }
  return out;
}

Tensor run_cumsum(const Tensor& x, int64_t axis, bool excl, bool rev) {
  Graph g;
  g.add_output(g.cumsum(g.input("x", x.shape_info()), axis, excl, rev));
  return run_cpu1(g, {{"x", x}});
}

void check_cumsum(const Tensor& x, int64_t axis) {
  const int64_t a = norm(axis, x.shape().size());
  const DType dt = x.dtype();
  const testing::Tolerance tol = dt == DType::F16    ? testing::Tolerance{2e-3, 1e-3}
                                 : dt == DType::BF16 ? testing::Tolerance{1.6e-2, 1e-2}
                                                     : testing::default_tolerance(dt);
  for (bool excl : {false, true})
    for (bool rev : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " axis " + std::to_string(axis) + " exclusive " +
                   std::to_string(excl) + " reverse " + std::to_string(rev));
      const Tensor out = run_cumsum(x, axis, excl, rev);
      EXPECT_EQ(out.dtype(), dt);
      EXPECT_TRUE(testing::all_close(out, x.shape(), ref_cumsum(to_doubles(x), x.shape(), a, excl, rev), tol));
    }
}

TEST(Indexing, CumsumAllFlagsAxesAndDtypes) {
  const Tensor f = random_tensor(DType::F32, {3, 4, 5}, 60);
  for (int64_t axis : {0, 1, 2, -1, -3}) check_cumsum(f, axis);
  for (DType dt : {DType::F16, DType::BF16, DType::F64}) check_cumsum(random_tensor(dt, {3, 6, 2}, 61, 0, 1), 1);
  for (DType dt : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32})
    check_cumsum(random_tensor(dt, {2, 5, 3}, 62, 0, 8), -2);
  check_cumsum(random_tensor(DType::F32, {2, 9, 1100}, 63), 1);  // inner blocks
  check_cumsum(random_tensor(DType::F32, {1, 1}, 64), 0);
}

TEST(Indexing, CumsumAccumulation) {
  // Integers accumulate in their own width (wrap around).
  EXPECT_TRUE(testing::all_close(run_cumsum(from_doubles(DType::I8, {3}, {100, 100, 100}), 0, false, false), {3},
                                 {100, -56, 44}, {0, 0}));
  EXPECT_TRUE(testing::all_close(run_cumsum(from_doubles(DType::U8, {3}, {200, 100, 1}), 0, true, false), {3},
                                 {0, 200, 44}, {0, 0}));
  // 2048 + 1 is not representable in f16 (rounds to 2048), but the f32 accumulator keeps it:
  // 2048 + 1 + 1 = 2050, which is.
  EXPECT_TRUE(testing::all_close(run_cumsum(from_doubles(DType::F16, {3}, {2048, 1, 1}), 0, false, false), {3},
                                 {2048, 2048, 2050}, {0, 0}));
}

TEST(Indexing, CumsumZeroSizeAndBadInputs) {
  EXPECT_EQ(run_cumsum(Tensor::zeros(DType::F32, {0, 3}), 1, true, true).shape(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(run_cumsum(Tensor::zeros(DType::I32, {3, 0}), 1, false, true).shape(), (std::vector<int64_t>{3, 0}));
  Graph g;
  Value x = g.input("x", Shape::of({3, 5}));
  EXPECT_THAT(error_message([&] { g.cumsum(x, 2); }), HasSubstr("axis 2 is out of range"));
  EXPECT_THAT(error_message([&] { g.cumsum(x, -3); }), HasSubstr("f32[3,5]"));
  EXPECT_THAT(error_message([&] { g.cumsum(g.input("b", Shape::of({3}, DType::Bool)), 0); }), HasSubstr("bool"));
  EXPECT_THAT(error_message([&] { g.cumsum(g.input("s", Shape::of({})), 0); }), HasSubstr("scalar"));
}

}  // namespace
}  // namespace rlx
